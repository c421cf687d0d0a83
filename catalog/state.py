"""What of a catalog variant is already in ``models_dir``, and the catalog's wire shape
(GET /v1/models/catalog)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypnos.catalog.blocks import config_block
from hypnos.catalog.catalog import Catalog, CatalogFile, Entry, Variant


@dataclass(frozen=True)
class FileState:
    present: bool
    outdated: bool
    size_on_disk: int


def local_size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def file_state(models_dir: Path, f: CatalogFile) -> FileState:
    path = models_dir / f.local
    if f.is_folder:
        present = path.is_dir() and any(path.iterdir())
    else:
        present = path.is_file()
    size = local_size(path) if present else 0
    outdated = present and f.size is not None and size != f.size
    return FileState(present, outdated, size)


def gguf_architecture(path: Path) -> str | None:
    """``general.architecture`` of a GGUF file, or None when it is not a readable GGUF."""
    # The header scan, not gguf.GGUFReader: the reader builds a numpy view per vocabulary
    # item (~20 s a file here), and GET /v1/models/catalog reads every installed GGUF.
    from hypnos.engines.gguf_meta import read_gguf_kv
    try:
        arch = read_gguf_kv(path).get("general.architecture")
    except (OSError, ValueError):      # a broken file is reported as "no architecture"
        return None
    return arch if isinstance(arch, str) else None


def variant_problem(models_dir: Path, entry: Entry, variant: Variant) -> str | None:
    """Why the downloaded weights do not match the entry, or None."""
    weights = variant.file_for("weights")
    if entry.engine != "ggml_llama" or weights is None or not entry.architecture:
        return None
    path = models_dir / weights.local
    if not path.is_file():
        return None
    arch = gguf_architecture(path)
    if arch is None:
        return f"{weights.local} is not a readable GGUF file"
    if arch != entry.architecture:
        return (f"{weights.local} reports architecture {arch!r}, "
                f"the catalog expects {entry.architecture!r}")
    return None


def file_wire(models_dir: Path, f: CatalogFile) -> dict:
    st = file_state(models_dir, f)
    out: dict = {"role": f.role}
    if f.repo:
        out.update(repo=f.repo, remote=f.remote)
    if f.pypi:
        out["pypi"] = [{k: v for k, v in vars(p).items() if v is not None} for p in f.pypi]
    out["local"] = f.local
    if f.entry:
        out["entry"] = f.entry
    if f.size is not None:
        out["size"] = f.size
    out.update(platform=f.platform, present=st.present, outdated=st.outdated)
    if f.gated:
        out["gated"] = True
    return out


def variant_wire(models_dir: Path, entry: Entry, v: Variant) -> dict:
    files = [file_wire(models_dir, f) for f in v.files]
    out = {
        "quant": v.quant, "default": v is entry.default_variant(), "size_bytes": v.size_bytes,
        "files": files,
        "installed": all(f["present"] for f in files),
        "outdated": any(f["outdated"] for f in files),
        "config_block": config_block(entry, v),
    }
    if v.size_note:
        out["size_note"] = v.size_note
    problem = variant_problem(models_dir, entry, v)
    if problem:
        out["problem"] = problem
    return out


def entry_wire(models_dir: Path, entry: Entry, configured: dict[str, tuple[bool, str | None]]
               ) -> dict:
    """``configured`` maps a configured model id to (enabled, weights_path)."""
    out = {
        "id": entry.id, "name": entry.name, "publisher": entry.publisher,
        "license": entry.license, "modality": entry.modality,
        "additional_modalities": list(entry.additional_modalities),
        "engine": entry.engine, "capabilities": list(entry.capabilities),
        "summary": entry.summary, "lineup": entry.lineup,
        "configured": entry.id in configured,
        "enabled": configured.get(entry.id, (False, None))[0],
    }
    if entry.architecture:
        out["architecture"] = entry.architecture
    if entry.released:
        out["released"] = entry.released
    if entry.requires_llama_cpp:
        out["requires_llama_cpp"] = entry.requires_llama_cpp
    if entry.id in configured:
        weights = configured[entry.id][1]
        for v in entry.variants:
            f = v.file_for("weights")
            if f is not None and weights and f.local.rstrip("/") == weights.rstrip("/"):
                out["configured_quant"] = v.quant
    if entry.note:
        out["note"] = entry.note
    out["variants"] = [variant_wire(models_dir, entry, v) for v in entry.variants]
    return out


def catalog_wire(catalog: Catalog, models_dir: Path, *, modality: str | None = None,
                 configured: dict[str, tuple[bool, str | None]] | None = None) -> dict:
    entries = [e for e in catalog.entries if modality is None or modality in e.modalities]
    data = []
    for e in entries:
        wire = entry_wire(models_dir, e, configured or {})
        reason = catalog.unsupported_reason(e)
        if reason:
            wire["unsupported"] = reason
        data.append(wire)
    return {
        "object": "list", "catalog_version": catalog.version, "models_dir": str(models_dir),
        "tested_architectures": list(catalog.tested_architectures),
        "data": data,
    }
