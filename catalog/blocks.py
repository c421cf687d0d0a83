"""The ``[[models]]`` config block that runs a catalog variant (paths relative to models_dir)."""
from __future__ import annotations

import tomlkit

from hypnos.catalog.catalog import Entry, Variant

# catalog file role -> config key (mirrors service.config_schema.FILE_ROLES; the catalog may
# not import the service, and a test checks the two agree)
ROLE_KEYS = {
    "weights": "weights_path",
    "aux": "aux_path",
    "text_encoder": "text_encoder_path",
    "tokenizer": "tokenizer_path",
    "voices": "voices_path",
}


def block_fields(entry: Entry, variant: Variant) -> dict:
    """The block as a plain dict (the advisor adds its own placement choices on top)."""
    block: dict = {"id": entry.id, "modality": entry.modality}
    if entry.additional_modalities:
        block["modalities"] = list(entry.additional_modalities)
    block["engine"] = entry.engine
    for f in variant.files:
        key = ROLE_KEYS.get(f.role)
        if key and key not in block:
            local = f.local.rstrip("/")
            block[key] = f"{local}/{f.entry}" if f.entry else local
    block["quant"] = variant.quant
    block.update(entry.defaults)
    if entry.architecture:
        block["arch"] = {"architecture": entry.architecture}
    return block


def render_blocks(blocks: list[dict], header: str = "") -> str:
    doc = tomlkit.document()
    if header:
        for line in header.splitlines():
            doc.add(tomlkit.comment(line))
    aot = tomlkit.aot()
    for b in blocks:
        aot.append(tomlkit.item(b))
    doc.add("models", aot)
    return tomlkit.dumps(doc)


def config_block(entry: Entry, variant: Variant) -> str:
    header = (f"{entry.name} ({variant.quant}), {entry.publisher}, license {entry.license}. "
              f"{entry.summary}").strip()
    return render_blocks([block_fields(entry, variant)], header)
