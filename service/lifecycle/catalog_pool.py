"""Pull a catalog variant into the pool, and remove a model with its files: what Ollama's
/api/pull and /api/delete do here.

A pull fetches the variant's missing files into models_dir (`catalog.pull`, which checks
each fetched file's size and sha256 before it is moved into place; files already present
are kept as they are, as ``hypnos models pull`` keeps them), then adds the model to the pool
as POST /v1/models ``{"catalog": ...}`` does: the startup checks, `Scheduler.add` (cold, in
tier 3) and the overlay. A model whose id is already in the pool is left as it is.

A removal takes the model out of the pool as DELETE /v1/models/{id} does (it drains, then
unloads; the overlay records it), then deletes the files it named inside models_dir that
neither hold nor lie inside a path another model of the pool names, and the folders that
leaves empty. Paths are resolved again just before the deletion, and one outside models_dir
is never deleted.

Neither a pull nor a removal is made when the pool it leaves would not start
(`refuse_conflict`: a 409 naming the reason), and one pull of a model id runs at a time.

Every function here runs on the event loop; the blocking work (downloads, header reads,
file removal) goes to worker threads.
"""
from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path

from hypnos.catalog.blocks import config_block
from hypnos.catalog.catalog import CatalogFile, Entry, Variant
from hypnos.catalog.pull import pull_variant
from hypnos.catalog.state import file_state
from hypnos.service.config.load import ConfigError, parse_model_block
from hypnos.service.config.overlay import persist
from hypnos.service.config.pool_rules import change_conflict
from hypnos.service.config.schema import ModelConfig
from hypnos.service import errors
from hypnos.service.scheduling.model_checks import startup_checks
from hypnos.service.state import state

DRAIN_SECS = 120.0          # as DELETE /v1/models/{id} without drain_secs


def digest(f: CatalogFile) -> str:
    """The file's name in Ollama's progress lines: ``sha256:<hex>``, or its local path when
    the catalog lists no sha256 (a folder)."""
    return f"sha256:{f.sha256}" if f.sha256 else f.local


def present_size(models_dir: Path, f: CatalogFile) -> int:
    """Bytes of ``f`` already in place (0 when missing or outdated)."""
    st = file_state(models_dir, f)
    return st.size_on_disk if st.present and not st.outdated else 0


async def pull_file(entry: Entry, variant: Variant, f: CatalogFile, models_dir: Path) -> int:
    """Fetch one file of ``variant`` unless present; its size once in place. Raises
    `PullError` (the message says what to do)."""
    one = dataclasses.replace(variant, files=(f,))
    await asyncio.to_thread(pull_variant, entry, one, models_dir)
    return present_size(models_dir, f) or (f.size or 0)


def refuse_conflict(app, model_id: str, new: ModelConfig | None) -> None:
    """409 when setting pool entry ``model_id`` to ``new`` (None: removing it) would leave
    a pool the next start refuses (`pool_rules.change_conflict` says why)."""
    problem = change_conflict(state(app).config, model_id, new)
    if problem is not None:
        raise errors.PoolConflict(problem)


def _pulled_block(entry: Entry, variant: Variant) -> tuple[str, ModelConfig]:
    """The ``[[models]]`` text a pull adds, and its config."""
    text = config_block(entry, variant)
    try:
        return text, parse_model_block(text)
    except ConfigError as exc:        # the catalog's own block: a bug of the catalog
        raise errors.ServerError("The catalog's model block is invalid: "
                                 + "; ".join(exc.problems)) from None


def check_pull(app, entry: Entry, variant: Variant) -> None:
    """Before any file is fetched: 409 when the pulled model could not join the pool (its
    id is another model's alias...). Nothing to check when its id is already in the pool:
    the pull then adds nothing."""
    if entry.id not in state(app).scheduler.models:
        _, m = _pulled_block(entry, variant)
        refuse_conflict(app, m.id, m)


async def add_pulled(app, entry: Entry, variant: Variant) -> bool:
    """Add the pulled variant to the pool under the entry's id; False when that id is
    already there (nothing changes). A failed startup check is a 400 naming the problems,
    a pool the next start would refuse a 409."""
    sched = state(app).scheduler
    if entry.id in sched.models:
        return False
    text, m = _pulled_block(entry, variant)
    catalog = state(app).catalog
    tested = catalog.tested_architectures if catalog is not None else None
    st, problems = await asyncio.to_thread(startup_checks, state(app).config, m, tested)
    if problems or st is None:
        raise errors.InvalidRequest("; ".join(problems), param="model")
    if entry.id in sched.models:      # added meanwhile (POST /v1/models)
        return False
    refuse_conflict(app, st.id, st.cfg)
    sched.add(st)
    cfg = state(app).config
    cfg.models = [x for x in cfg.models if x.id != st.id] + [st.cfg]
    await asyncio.to_thread(persist, cfg.source, st.id, text)
    return True


def owned_files(paths: list[Path], others: list[Path], root: Path) -> list[Path]:
    """The ``paths`` of a model being removed that may be deleted: inside ``root``
    (models_dir) and not root itself, and neither holding nor lying inside any of
    ``others`` (the paths the rest of the pool names). All resolved by the caller. Pure."""
    out: list[Path] = []
    for path in paths:
        if path == root or not path.is_relative_to(root) or path in out:
            continue
        if any(path.is_relative_to(o) or o.is_relative_to(path) for o in others):
            continue
        out.append(path)
    return out


def delete_files(paths: list[Path], root: Path) -> list[str]:
    """Remove ``paths`` (files or folders) and the folders under ``root`` (models_dir,
    resolved) they leave empty; the paths removed, relative to root. Blocks."""
    gone = []
    for path in paths:
        if path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        else:
            continue
        gone.append(str(path.relative_to(root)))
        parent = path.parent
        while parent != root and root in parent.parents and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return gone


def _delete_owned(paths: list[Path], others: list[Path], root: Path) -> list[str]:
    """Resolve every path now (a link may have changed since the start-up checks), then
    delete what `owned_files` allows. Blocks."""
    root = root.resolve()
    return delete_files(owned_files([p.resolve() for p in paths],
                                    [o.resolve() for o in others], root), root)


async def remove_with_files(app, model_id: str) -> list[str]:
    """Take ``model_id`` (an id or alias) out of the pool, then delete the files only it
    names; the files deleted. 404 for an unknown model; 409 when another model drafts with
    it (or the pool left would not start); 429 when requests still run after the drain."""
    sched = state(app).scheduler
    st = sched.get(model_id, enabled_only=False)
    refuse_conflict(app, st.id, None)
    cfg = state(app).config
    await sched.pool.swap(st.id, None, DRAIN_SECS)
    cfg.models = [x for x in cfg.models if x.id != st.id]
    await asyncio.to_thread(persist, cfg.source, st.id, None)
    others = [p for o in sched.models.values() if o.id != st.id for p in o.paths.values()]
    return await asyncio.to_thread(_delete_owned, list(st.paths.values()), others,
                                   cfg.models_dir)
