"""What a model list tells a client about one model, read without loading it.

The OpenAI list, Codex's catalog and Anthropic's list (`hypnos.service.wire.model_lists`)
render the same `ModelFacts`: the context window (`Scheduler.context_window`: the per-slot
context this machine can fund), the largest answer (limits.max_tokens_cap, never above the
window), and what the chat template says the model does: call tools, think. The template is
the loaded engine's when there is one, else the config's ``chat_template``, else the one in
the GGUF header (read once per file).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from hypnos.engines.chat_format.detect import detect
from hypnos.engines.chat_format.prepare import ChatFormat
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.wire.model_lists import ModelFacts


@lru_cache(maxsize=64)
def _gguf_template(path: str, mtime_ns: int) -> str | None:
    from hypnos.engines.gguf_meta import read_gguf_meta
    try:
        return read_gguf_meta(path).chat_template
    except (OSError, ValueError):
        return None


def chat_format(st: ModelState) -> ChatFormat | None:
    """The chat format ``st``'s engine uses or will use; None for a model that is not a
    GGUF chat model or whose template cannot be read (no claim is made for it)."""
    loaded = getattr(st.engine, "format", None)
    if isinstance(loaded, ChatFormat):
        return loaded
    template = st.cfg.chat_template
    if template is None:
        weights = st.paths.get("weights_path")
        if weights is None or Path(weights).suffix != ".gguf":
            return None
        try:
            template = _gguf_template(str(weights), Path(weights).stat().st_mtime_ns)
        except OSError:
            return None
    return detect(template or "", st.cfg.tool_format)


def facts(sched: Scheduler, st: ModelState, max_tokens_cap: int,
          alias: str | None = None) -> ModelFacts:
    """``st``'s facts, listed under ``alias`` when given."""
    mods = set(st.cfg.all_modalities)
    text = bool(mods & {"text_generation", "vision"})
    window = sched.context_window(st) if text else 0
    fmt = chat_format(st) if text else None
    return ModelFacts(
        id=alias or st.id, alias_of=st.id if alias else None, context_window=window,
        max_output_tokens=min(max_tokens_cap, window) if text else 0,
        tools=text and st.cfg.tool_format != "none" and (fmt is None or fmt.tools is not None),
        thinks=fmt is not None and fmt.think is not None, vision="vision" in mods)


def listed(sched: Scheduler, max_tokens_cap: int) -> list[tuple[ModelState, ModelFacts]]:
    """Every enabled model, then each alias, with its facts (the order /v1/models lists)."""
    models = [st for st in sched.models.values() if st.enabled]
    out = [(st, facts(sched, st, max_tokens_cap)) for st in models]
    by_id = {st.id: f for st, f in out}
    out += [(st, ModelFacts(**{**by_id[st.id].__dict__, "id": alias, "alias_of": st.id}))
            for st in models for alias in st.cfg.aliases]
    return out
