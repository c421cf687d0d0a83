"""The chat lease every dialect takes (/v1/chat/completions, /v1/messages, /v1/responses,
/api/chat, /api/generate), and the raw prompt's (/v1/completions, /api/generate raw): the
model serves what the request needs (a tool format when tools are active,
checked on its config before anything loads), the media parts fit the limits and are read,
and the prompt is counted on the loaded tokenizer inside the lease."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from hypnos.engines.chat_format import MEDIA_PARTS
from hypnos.engines.protocols import ChatEngine
from hypnos.planner.context import request_context, tokens_from_chars
from hypnos.service import errors
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.leased import LeasedCall
from hypnos.service.inference.text import chat_counter, check_text_model, text_lease
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.media.fetch import part_bytes
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.wire.chat import ChatParams

Counter = Callable[[ChatEngine], int | None]


def check_chat(caller: Caller, params: ChatParams) -> ModelState:
    """The model's record, once it is known to serve this request (before any load): text
    generation, a tool format when tools are active, vision or audio for media parts, and
    the images within max_images_per_request."""
    req = params.request
    st = check_text_model(caller.sched, params.model,
                          bool(req.tools) and req.tool_choice != "none")
    mods = st.cfg.all_modalities
    for part, needed in (("image_url", "vision"), ("input_audio", "speech_to_text")):
        if params.media.get(part) and needed not in mods:
            raise errors.InvalidRequest(f"The model '{params.model}' cannot read {part} parts "
                                        f"(it does not serve {needed})", param="messages")
    images = params.media.get("image_url", 0)
    limit = caller.limits.max_images_per_request
    if images > limit:
        raise errors.InvalidRequest(f"The messages hold {images} images, above "
                                    f"max_images_per_request ({limit})", param="messages")
    return st


async def media_bytes(params: ChatParams, limits: LimitsConfig) -> list[bytes]:
    """Every image / audio part's bytes, in prompt order (downloads awaited)."""
    out = []
    for i, m in enumerate(params.request.messages):
        if isinstance(m.get("content"), list):
            for j, part in enumerate(m["content"]):
                if part.get("type") in MEDIA_PARTS:
                    out.append(await part_bytes(part, f"messages[{i}].content[{j}]", limits))
    return out


def has_template(engine: ChatEngine) -> bool:
    """The loaded model renders chat turns: a llama engine says whether its GGUF (or its
    config) carries a chat template; every other chat engine always renders them."""
    return bool(getattr(engine, "has_template", True))


def _templated(count: Counter | None) -> Counter | None:
    """``count``, skipped on a model without a template (its prompt is then sent raw, and
    the engine refuses one past the context itself)."""
    if count is None:
        return None
    counting = count

    def counted(engine: ChatEngine) -> int | None:
        return counting(engine) if has_template(engine) else None
    return counted


@asynccontextmanager
async def chat_lease(caller: Caller, params: ChatParams, *,
                     raw_without_template: bool = False) -> AsyncIterator[LeasedCall]:
    """The checked, leased chat call for ``params`` (``check_chat`` before the lease, the
    media read, the prompt counted inside the lease). ``raw_without_template``: a model
    without a chat template will get the prompt raw (/api/generate), so it is not counted
    as a chat."""
    st = check_chat(caller, params)
    if params.media:
        params.request.media = await media_bytes(params, caller.limits)
    window = caller.sched.context_window(st)
    count = chat_counter(window, params)
    async with text_lease(caller, params.model, params.estimated_ctx(),
                          _templated(count) if raw_without_template else count) as call:
        yield call


def raw_estimate(prompt: str, max_tokens: int, window: int) -> int:
    """The per-slot context a raw prompt (no template) needs, about 4 characters a token,
    never above the model's window (a longer prompt is the engine's 422)."""
    return min(request_context(tokens_from_chars(len(prompt)), max_tokens), window)


@asynccontextmanager
async def raw_lease(caller: Caller, model_id: str, prompt: str,
                    max_tokens: int) -> AsyncIterator[LeasedCall]:
    """The checked, leased call for a raw prompt (/v1/completions, /api/generate raw): a
    text model, sized by `raw_estimate`."""
    st = check_text_model(caller.sched, model_id)
    estimate = raw_estimate(prompt, max_tokens, caller.sched.context_window(st))
    async with text_lease(caller, model_id, estimate) as call:
        yield call


async def prompt_tokens(caller: Caller, params: ChatParams) -> tuple[int, dict]:
    """The prompt's size on the model's own tokenizer and template (loads the model), and
    the lease's wait headers: count_tokens and input_tokens."""
    async with chat_lease(caller, params) as call:
        if params.prompt_tokens is None:
            params.prompt_tokens = await asyncio.to_thread(call.chat.prompt_tokens,
                                                           params.request)
        return params.prompt_tokens, call.wait_headers()
