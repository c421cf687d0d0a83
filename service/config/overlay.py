"""Keep run-time model pool changes in ``<config name>.models.toml`` beside the config (spec
section 6). The config file itself is never rewritten. `config.load_config` applies the
overlay at the next start: its ``[[models]]`` blocks add or replace models by id, and
``removed = [...]`` drops models of the config file.

Edited with tomlkit so an operator's comments in the overlay survive; written with
`write_atomic`, so a crash leaves the old or the new overlay, never a torn one.
"""
from __future__ import annotations

import logging
from pathlib import Path

import tomlkit

from hypnos.service.config.atomic import write_atomic
from hypnos.service.config.load import overlay_path

log = logging.getLogger("hypnos.overlay")


def _new_document() -> tomlkit.TOMLDocument:
    doc = tomlkit.document()
    doc.add(tomlkit.comment("Model pool changes made while Hypnos ran "
                            "(POST/PUT/DELETE /v1/models); applied over the config."))
    return doc


def _without(doc: tomlkit.TOMLDocument, model_id: str) -> None:
    """Drop ``model_id`` from the overlay's blocks and from its removed list."""
    blocks = doc.get("models")
    if blocks is not None:
        keep = [t for t in blocks if t.get("id") != model_id]
        if len(keep) != len(blocks):
            aot = tomlkit.aot()
            for t in keep:
                aot.append(t)
            doc["models"] = aot
    removed = doc.get("removed")
    if removed is not None and model_id in removed:
        doc["removed"] = [x for x in removed if x != model_id]


def overlay_text(current: str | None, model_id: str, block_text: str | None) -> str:
    """The overlay after setting ``model_id`` to the one ``[[models]]`` block in
    ``block_text`` (its id forced to ``model_id``), or after removing it (None). Pure."""
    doc = tomlkit.parse(current) if current is not None else _new_document()
    _without(doc, model_id)
    if block_text is None:
        removed = doc.get("removed")
        if removed is None:
            doc["removed"] = [model_id]
        else:
            removed.append(model_id)
    else:
        table = tomlkit.parse(block_text)["models"][0]
        table["id"] = model_id
        if "models" not in doc:
            doc.add("models", tomlkit.aot())
        doc["models"].append(table)
    return tomlkit.dumps(doc)


def persist(config_path: Path | None, model_id: str, block_text: str | None) -> bool:
    """Record the change; False when it could not be written (no config file, a read-only
    folder, an unreadable overlay): the change is then live until the next restart only."""
    if config_path is None:
        return False
    path = overlay_path(config_path)
    try:
        current = path.read_text(encoding="utf-8") if path.exists() else None
        write_atomic(path, overlay_text(current, model_id, block_text))
    except (OSError, ValueError) as exc:   # tomlkit's parse errors are ValueErrors
        log.warning("could not write the model overlay %s: %s", path, exc)
        return False
    return True
