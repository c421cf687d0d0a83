"""What every chat dialect checks before and after it takes the lease (/v1/chat/completions,
/v1/messages): the model serves what the request needs, the media parts fit the limits and are
read, and the loaded model has a tool format when tools are active."""
from __future__ import annotations

from hypnos.engines.chat_format import MEDIA_PARTS
from hypnos.service.http import errors
from hypnos.service.inference.text import check_text_model
from hypnos.service.media.fetch import part_bytes
from hypnos.service.wire.chat import ChatParams


def check_chat(request, params: ChatParams):
    """The model's record, once it is known to serve this request (before any load): text
    generation, a tool format when tools are active, vision or audio for media parts, and
    the images within max_images_per_request."""
    req = params.request
    st = check_text_model(request.app.ctx.scheduler, params.model,
                          bool(req.tools) and req.tool_choice != "none")
    mods = st.cfg.all_modalities
    for part, needed in (("image_url", "vision"), ("input_audio", "speech_to_text")):
        if params.media.get(part) and needed not in mods:
            raise errors.InvalidRequest(f"The model '{params.model}' cannot read {part} parts "
                                        f"(it does not serve {needed})", param="messages")
    images = params.media.get("image_url", 0)
    limit = request.app.ctx.config.limits.max_images_per_request
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
