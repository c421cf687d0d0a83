"""A pool entry for a configured model: its files resolved, its shape read (GGUF metadata for
llama.cpp models, file sizes otherwise) and any problem that keeps it from serving (a 503
naming it, while the others keep serving)."""
from __future__ import annotations

from pathlib import Path

from hypnos.engines.registry import is_available
from hypnos.planner.footprint import WHOLE_MODEL_WORKSPACE_BYTES
from hypnos.planner.types import DraftShape, ModelShape
from hypnos.service.config.load import resolve_model_file
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.service.scheduling.pool import ModelState




def model_shape(m: ModelConfig, paths: dict[str, Path]) -> ModelShape:
    """What the planner needs: GGUF metadata for llama.cpp models, file sizes otherwise."""
    weights = paths.get("weights_path")
    if m.engine == "ggml_llama" and weights is not None and weights.is_file():
        from hypnos.engines.gguf_meta import read_gguf_meta
        # A projector lives beside the weights, booked with them; a speculative drafter
        # is the shape's own part (its weights and its own KV, `draft_shape`).
        aux = paths.get("aux_path")
        projector = aux.stat().st_size if aux is not None and aux.is_file() else 0
        meta = read_gguf_meta(weights)
        return meta.to_shape(projector_bytes=projector, draft=draft_shape(m, paths, meta))
    size = 0
    for p in paths.values():
        if p.is_dir():
            size += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.is_file():
            size += p.stat().st_size
    # Whether it may use the GPU is the scheduler's call (engine kind and build).
    return ModelShape(weights_bytes=size, workspace_bytes=WHOLE_MODEL_WORKSPACE_BYTES)


def draft_shape(m: ModelConfig, paths: dict[str, Path], target) -> DraftShape | None:
    """The drafter ``m``'s ``speculative`` setting loads beside it (``target``: its
    ``GgufMeta``): a draft model (``paths["draft_path"]``, read from its GGUF), MTP heads (a
    separate ``paths["mtp_path"]``, else the target's own nextn blocks), or None."""
    from hypnos.engines.gguf_meta import read_gguf_meta
    spec = m.speculative
    draft = paths.get("draft_path")
    if isinstance(spec, dict) and isinstance(spec.get("draft"), str) and draft is not None \
            and draft.is_file() and spec.get("mode", "draft") in ("draft", "auto"):
        return read_gguf_meta(draft).as_draft(spec["draft"])
    if _uses_mtp(m, paths):
        mtp = paths.get("mtp_path")
        return target.mtp_draft(read_gguf_meta(mtp) if mtp is not None and mtp.is_file()
                                else None)
    return None


def _uses_mtp(m: ModelConfig, paths: dict[str, Path]) -> bool:
    """The engine's ``choose.uses_mtp`` on the config: ``mtp``, or ``auto`` with a pulled head."""
    from hypnos.engines.llama.speculative.choose import parse_spec
    try:
        spec = parse_spec(m.speculative)
    except ValueError:
        return False
    return spec.mode == "mtp" or (spec.mode == "auto" and spec.draft is None
                                  and paths.get("mtp_path") is not None)


def _draft_of(cfg: Config, m: ModelConfig) -> ModelConfig | None:
    """The model ``m``'s ``speculative`` setting names as its draft, if any."""
    draft = m.speculative.get("draft") if isinstance(m.speculative, dict) else None
    return cfg.model(draft) if isinstance(draft, str) else None


def _mtp_problem(cfg: Config, m: ModelConfig, paths: dict[str, Path]) -> str | None:
    """Put the catalog's separate MTP head of the model's variant (its optional ``mtp`` file,
    if it records one and it is pulled) in ``paths["mtp_path"]`` under ``speculative =
    "mtp"`` or ``"auto"`` (which then measures it). Under ``mtp``, the problem (a 503 naming
    the model) when that file is not pulled, or when there is none and the GGUF carries no
    nextn layers."""
    from hypnos.engines.llama.speculative.choose import parse_spec
    try:
        spec = parse_spec(m.speculative)
    except ValueError:
        return None                     # the config's own check names it
    if m.engine != "ggml_llama" or spec.mode not in ("mtp", "auto") or spec.draft is not None:
        return None
    head = _catalog_head(cfg, m)
    if head is not None and head.is_file():
        paths["mtp_path"] = head
        return None
    if spec.mode != "mtp":
        return None
    if head is not None:
        return (f"The model '{m.id}' is configured with speculative = \"mtp\" but its MTP head "
                f"{head.name!r} is not in models_dir; fetch it with "
                f"`hypnos models pull --mtp {m.id}`")
    weights = paths.get("weights_path")
    if weights is None or not weights.is_file():
        return None
    from hypnos.engines.errors import MtpUnavailable
    from hypnos.engines.gguf_meta import read_gguf_meta
    from hypnos.engines.llama.speculative.mtp import require_mtp_heads
    try:
        require_mtp_heads(read_gguf_meta(weights), m.id)
    except MtpUnavailable as exc:
        return str(exc)
    except (ValueError, OSError):
        return None                     # an unreadable header is model_shape's problem
    return None


def _catalog_head(cfg: Config, m: ModelConfig) -> Path | None:
    """Where the catalog's optional ``mtp`` file of the model's variant lies, if any."""
    from hypnos.catalog.catalog import load_catalog
    try:
        entry = load_catalog().get(m.id)
        variant = entry.variant(m.quant) if entry is not None else None
        heads = variant.optional_for(("mtp",)) if variant is not None else ()
        return resolve_model_file(cfg.models_dir, heads[0].local) if heads else None
    except ValueError:                  # a CatalogError (no such variant), a path outside
        return None


def build_state(cfg: Config, m: ModelConfig) -> ModelState:
    """A pool entry; a model whose files are missing or unreadable is kept with a problem
    (503 naming it) so the others keep serving."""
    paths, problem = {}, None
    for key, rel in m.file_paths().items():
        try:
            paths[key] = resolve_model_file(cfg.models_dir, rel)
        except ValueError as exc:
            problem = f"{m.id}: {key} {exc}"
            continue
        if not paths[key].exists():
            problem = (f"The model '{m.id}' is configured but {key} {rel!r} is not in "
                       f"models_dir ({cfg.models_dir}); fetch it with ./run.sh models {m.id}")
    draft = _draft_of(cfg, m)
    if draft is not None and draft.weights_path and problem is None:
        # The draft model's weights travel with the target (its shape books them too).
        try:
            paths["draft_path"] = resolve_model_file(cfg.models_dir, draft.weights_path)
        except ValueError as exc:
            problem = f"{m.id}: speculative draft {draft.id}: {exc}"
    if problem is None:
        problem = _mtp_problem(cfg, m, paths)
    try:
        shape = model_shape(m, paths) if problem is None else ModelShape(weights_bytes=0)
    except (ValueError, OSError) as exc:
        shape, problem = ModelShape(weights_bytes=0), f"The model '{m.id}' cannot be read: {exc}"
    if not is_available(m.engine, m.modality):
        problem = (f"The model '{m.id}' needs engine {m.engine}, which this version of "
                   "Hypnos does not implement yet")
    st = ModelState(cfg=m, paths=paths, shape=shape)
    st.problem = problem
    return st
