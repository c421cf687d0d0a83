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
    if spec == "mtp":
        mtp = paths.get("mtp_path")
        return target.mtp_draft(read_gguf_meta(mtp) if mtp is not None and mtp.is_file()
                                else None)
    return None


def _draft_of(cfg: Config, m: ModelConfig) -> ModelConfig | None:
    """The model ``m``'s ``speculative`` setting names as its draft, if any."""
    draft = m.speculative.get("draft") if isinstance(m.speculative, dict) else None
    return cfg.model(draft) if isinstance(draft, str) else None


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
