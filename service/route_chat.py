"""POST /v1/chat/completions (spec 7): non-streaming and SSE streaming."""
from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time

from sanic import Blueprint, Request
from sanic.response import json as json_response

from hypnos.engines.base import (ChatResult, ContextOverflow, EngineError, InvalidGrammar,
                                 SessionCapacity)
from hypnos.service import errors
from hypnos.service.engine_call import run_engine
from hypnos.service.chat_request import ChatParams, parse_chat
from hypnos.service.http import deadline_ms, json_body, require_ready
from hypnos.service.route_sessions import AtSessionCapacity, session_key
from hypnos.service.telemetry import engine_timings, telemetry, wait_headers

bp = Blueprint("chat")
KEEPALIVE_SECS = 10.0


def _check_model(request: Request, params: ChatParams):
    st = request.app.ctx.scheduler.get(params.model)
    mods = st.cfg.all_modalities
    if "text_generation" not in mods and "vision" not in mods:
        raise errors.InvalidRequest(f"The model '{params.model}' does not serve chat "
                                    f"(its modality is {st.cfg.modality})", param="model")
    for part, needed in (("image_url", "vision"), ("input_audio", "speech_to_text")):
        if params.media.get(part) and needed not in mods:
            raise errors.InvalidRequest(f"The model '{params.model}' cannot read {part} parts "
                                        f"(it does not serve {needed})", param="messages")
    if params.media:
        raise errors.InvalidRequest("Media parts are not supported by this version's "
                                    "llama.cpp engine yet", param="messages")
    if params.request.tools and params.tool_choice != "none":
        raise errors.InvalidRequest(f"The model '{params.model}' has no tool calling format "
                                    "in Hypnos", param="tools")
    params.request.tools = None
    return st



def _prompt_tokens(count, params: ChatParams) -> int:
    """Tokens of the messages' text plus a few per message for the template's markers."""
    total = 0
    for m in params.request.messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        total += count(content or "") + 8
    return total


def _record(request: Request, lease, result: ChatResult) -> None:
    if result.timings.prefill_tokens_per_s:
        lease.model.stats.prefill_tps = result.timings.prefill_tokens_per_s
    request.app.ctx.metrics.chat(lease.model.id, result.timings)


def _usage(r: ChatResult) -> dict:
    usage = {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
             "total_tokens": r.prompt_tokens + r.completion_tokens}
    if r.cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": r.cached_tokens}
    return usage




def _engine_error(exc: Exception) -> errors.HypnosError:
    if isinstance(exc, ContextOverflow):
        return errors.InvalidRequest(str(exc), param="messages")
    if isinstance(exc, SessionCapacity):
        return AtSessionCapacity(str(exc), headers={"Retry-After": "30"})
    if isinstance(exc, InvalidGrammar):
        return errors.InvalidRequest(str(exc))
    return errors.ServerError(f"The engine failed: {exc}")


@bp.post("/v1/chat/completions")
async def chat_completions(request: Request):
    require_ready(request)
    body = json_body(request)
    params = parse_chat(body, request.app.ctx.config.limits)
    params.request.session_key = session_key(request, body)
    st = _check_model(request, params)
    if params.num_ctx is None:
        # The loaded tokenizer's count, so a long prompt of short words does not look longer
        # than it is and force a context rebuild (which drops the slots' prefix cache). Held,
        # so the engine cannot be unloaded meanwhile; skipped while a load/unload runs.
        async with request.app.ctx.scheduler.hold(st.id):
            count = getattr(st.engine, "count_tokens", None)
            if count is not None and not st.load_lock.locked():
                params.prompt_tokens = await asyncio.to_thread(_prompt_tokens, count, params)
    sched = request.app.ctx.scheduler
    async with sched.lease(params.model, deadline_ms=deadline_ms(request),
                           context_len=params.estimated_ctx()) as lease:
        if params.stream:
            return await _stream(request, params, lease)
        cancel = threading.Event()
        started = time.monotonic()
        try:
            result = await run_engine(lease.engine.chat, params.request, None, cancel=cancel)
        except EngineError as exc:
            raise _engine_error(exc) from None
        inference_ms = (time.monotonic() - started) * 1000
        _record(request, lease, result)
        placement = sched.placement_of(lease.model).to_wire()
        result.timings.queue_ms += lease.queue_ms
        body = {
            "id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion",
            "created": int(time.time()), "model": params.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                         "finish_reason": result.finish_reason}],
            "usage": _usage(result),
            "hypnos_telemetry": telemetry(lease, placement, inference_ms,
                                          engine_timings(result.timings)),
        }
        request.ctx.result = result
        return json_response(body, headers=wait_headers(lease))


def _chunk(base: dict, delta: dict, finish=None, **extra) -> str:
    payload = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
               **extra}
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def _stream(request: Request, params: ChatParams, lease):
    base = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion.chunk",
            "created": int(time.time()), "model": params.model}
    response = await request.respond(content_type="text/event-stream",
                                     headers={"cache-control": "no-cache",
                                              **wait_headers(lease)})
    await response.send(_chunk(base, {"role": "assistant", "content": ""}))
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()
    started = time.monotonic()
    task = asyncio.ensure_future(run_engine(
        lease.engine.chat, params.request,
        lambda piece: loop.call_soon_threadsafe(queue.put_nowait, piece), cancel=cancel))
    task.add_done_callback(lambda _t: queue.put_nowait(None))
    try:
        while True:
            try:
                piece = await asyncio.wait_for(queue.get(), KEEPALIVE_SECS)
            except asyncio.TimeoutError:
                await response.send(": keep-alive\n\n")
                continue
            if piece is None:
                break
            await response.send(_chunk(base, {"content": piece}))
        result = task.result()
    except EngineError as exc:
        err = _engine_error(exc)
        await response.send(_chunk(base, {}, "error",
                                   error={"message": err.message, "type": "server_error"}))
        await response.send("data: [DONE]\n\n")
        await response.eof()
        return None     # the response went out through request.respond()
    except asyncio.CancelledError:
        cancel.set()
        await asyncio.wait({task})
        raise
    inference_ms = (time.monotonic() - started) * 1000
    _record(request, lease, result)
    placement = request.app.ctx.scheduler.placement_of(lease.model).to_wire()
    result.timings.queue_ms += lease.queue_ms
    tele = telemetry(lease, placement, inference_ms, engine_timings(result.timings))
    await response.send(_chunk(base, {}, result.finish_reason, usage=_usage(result),
                               hypnos_telemetry=tele))
    await response.send("data: [DONE]\n\n")
    await response.eof()
    request.ctx.result = result
    return None
