"""The chat lease every dialect takes (/v1/chat/completions, /v1/messages, /v1/responses,
/api/chat): the model serves what the request needs, the media parts fit the limits and are
read, the prompt is counted on the loaded tokenizer inside the lease, and the loaded model has
a tool format when tools are active."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from hypnos.engines.chat_format import MEDIA_PARTS
from hypnos.service.http import errors
from hypnos.service.inference.leased import LeasedCall
from hypnos.service.inference.text import chat_counter, check_text_model, text_lease
from hypnos.service.media.fetch import part_bytes
from hypnos.service.wire.chat import ChatParams
from hypnos.service.state import state_of


def check_chat(request, params: ChatParams):
    """The model's record, once it is known to serve this request (before any load): text
    generation, a tool format when tools are active, vision or audio for media parts, and
    the images within max_images_per_request."""
    req = params.request
    st = check_text_model(state_of(request).scheduler, params.model,
                          bool(req.tools) and req.tool_choice != "none")
    mods = st.cfg.all_modalities
    for part, needed in (("image_url", "vision"), ("input_audio", "speech_to_text")):
        if params.media.get(part) and needed not in mods:
            raise errors.InvalidRequest(f"The model '{params.model}' cannot read {part} parts "
                                        f"(it does not serve {needed})", param="messages")
    images = params.media.get("image_url", 0)
    limit = state_of(request).config.limits.max_images_per_request
    if images > limit:
        raise errors.InvalidRequest(f"The messages hold {images} images, above "
                                    f"max_images_per_request ({limit})", param="messages")
    return st


async def media_bytes(params: ChatParams, limits) -> list[bytes]:
    """Every image / audio part's bytes, in prompt order (downloads awaited)."""
    out = []
    for i, m in enumerate(params.request.messages):
        if isinstance(m.get("content"), list):
            for j, part in enumerate(m["content"]):
                if part.get("type") in MEDIA_PARTS:
                    out.append(await part_bytes(part, f"messages[{i}].content[{j}]", limits))
    return out


def check_tool_format(engine, params: ChatParams) -> None:
    """Tools sent to a loaded model whose template has no tool format: a 400 on tools."""
    fmt = engine.format
    if params.request.tools and params.request.tool_choice != "none" and \
            fmt is not None and fmt.tools is None:
        raise errors.InvalidRequest(f"The model '{params.model}' has no tool calling "
                                    "format", param="tools")


@asynccontextmanager
async def chat_lease(request, params: ChatParams) -> AsyncIterator[LeasedCall]:
    """The checked, leased chat call for ``params`` (``check_chat``, the media read, the
    prompt counted inside the lease, ``check_tool_format`` on the loaded model)."""
    st = check_chat(request, params)
    if params.media:
        params.request.media = await media_bytes(params, state_of(request).config.limits)
    window = state_of(request).scheduler.context_window(st)
    async with text_lease(request, params.model, params.estimated_ctx(),
                          chat_counter(window, params)) as call:
        check_tool_format(call.chat, params)
        yield call


async def prompt_tokens(request, params: ChatParams) -> tuple[int, dict]:
    """The prompt's size on the model's own tokenizer and template (loads the model), and
    the lease's wait headers: count_tokens and input_tokens."""
    async with chat_lease(request, params) as call:
        if params.prompt_tokens is None:
            params.prompt_tokens = await asyncio.to_thread(call.chat.prompt_tokens,
                                                           params.request)
        return params.prompt_tokens, call.wait_headers()
