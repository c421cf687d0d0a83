"""POST /v1/chat/completions (spec 7, plus the Pantheon / Fermion request features the
chat issue names): non-streaming and SSE streaming, n choices, tools, thinking, logprobs."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time

from sanic import Blueprint, Request
from sanic.response import json as json_response

from hypnos.engines.errors import (ContextOverflow, EngineError, InvalidGrammar, MediaDecodeError,
                                   SessionCapacity)
from hypnos.engines.records import ChatDelta, ChatResult
from hypnos.service import errors
from hypnos.service.chat_request import CHAT_SCHEMA, ChatParams, parse_chat
from hypnos.service.generation import (choice_requests, choice_seeds, merged_timings, run_choices,
                                       stream_choices, usage)
from hypnos.engines.chat_format import MEDIA_PARTS
from hypnos.service.http import deadline_ms, json_body, require_ready
from hypnos.service.media import part_bytes
from hypnos.service.route_sessions import AtSessionCapacity, session_key
from hypnos.service.telemetry import engine_timings, telemetry, wait_headers
from hypnos.service.openapi import endpoint, json_object

bp = Blueprint("chat")


class ContextOverBudget(errors.HypnosError):
    """A prompt past the model's effective window (Pantheon's 422): never truncated."""
    status, type, code = 422, "context_over_budget", "context_over_budget"

    def __init__(self, prompt_tokens: int, cap: int):
        super().__init__(f"The prompt takes {prompt_tokens} tokens, past this model's context "
                         f"window of {cap} tokens (kv_used={prompt_tokens}, kv_cap={cap}); "
                         "shorten the conversation", param="messages")
        self.kv_used, self.kv_cap = prompt_tokens, cap

    def body(self) -> dict:
        out = super().body()
        out["error"].update(kv_used=self.kv_used, kv_cap=self.kv_cap)
        return out


def check_text_model(request: Request, model_id: str, tools_active: bool = False):
    """The model serves text generation, and a tool format when tools are sent."""
    st = request.app.ctx.scheduler.get(model_id)
    mods = st.cfg.all_modalities
    if "text_generation" not in mods and "vision" not in mods:
        raise errors.InvalidRequest(f"The model '{model_id}' does not serve text generation "
                                    f"(its modality is {st.cfg.modality})", param="model")
    if tools_active and st.cfg.tool_format == "none":
        raise errors.InvalidRequest(f"The model '{model_id}' has no tool calling format; "
                                    "send tool_choice \"none\" or no tools", param="tools")
    return st


def _check_model(request: Request, params: ChatParams):
    req = params.request
    st = check_text_model(request, params.model, bool(req.tools) and req.tool_choice != "none")
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


async def count_prompt(request: Request, st, params) -> None:
    """The exact prompt size from the loaded tokenizer and template (so a long prompt of
    short words does not force a context rebuild that drops the prefix cache), and the 422
    when it is past the window. Held, so the engine cannot be unloaded meanwhile; skipped
    while a load/unload runs or the model is not loaded (the engine checks again then)."""
    if params.num_ctx is not None:
        return
    async with request.app.ctx.scheduler.hold(st.id):
        count = getattr(st.engine, "prompt_tokens", None)
        if count is None or st.load_lock.locked():
            return
        try:
            params.prompt_tokens = await asyncio.to_thread(count, params.request)
        except EngineError as exc:
            raise engine_error(exc) from None
    window = request.app.ctx.scheduler.context_window(st)
    if params.prompt_tokens >= window:
        raise ContextOverBudget(params.prompt_tokens, window)


def engine_error(exc: Exception, window: int | None = None) -> errors.HypnosError:
    if isinstance(exc, MediaDecodeError):
        return errors.InvalidRequest(f"A media part could not be read: {exc}",
                                     param="messages")
    if isinstance(exc, ContextOverflow):
        return ContextOverBudget(exc.prompt_tokens, window or exc.cap)
    if isinstance(exc, SessionCapacity):
        return AtSessionCapacity(str(exc), headers={"Retry-After": "30"})
    if isinstance(exc, InvalidGrammar):
        return errors.InvalidRequest(str(exc))
    return errors.ServerError(f"The engine failed: {exc}")


def record(request: Request, lease, results: list[ChatResult]) -> None:
    """Stats and metrics from the first choice; the request is charged (keys, request log)
    for the prompt once and every choice's completion."""
    first = results[0]
    if first.timings.prefill_tokens_per_s:
        lease.model.stats.prefill_tps = first.timings.prefill_tokens_per_s
    request.app.ctx.metrics.chat(lease.model.id, first.timings)
    request.ctx.result = dataclasses.replace(
        first, completion_tokens=sum(r.completion_tokens for r in results))


def _message(r: ChatResult) -> dict:
    msg: dict = {"role": "assistant", "content": r.text}
    if r.reasoning:
        msg["reasoning_content"] = r.reasoning
    if r.tool_calls:
        msg["tool_calls"] = [_call_wire(c, i) for i, c in enumerate(r.tool_calls)]
    return msg


def _call_wire(call, index: int, with_index: bool = False) -> dict:
    out = {"id": f"call_{secrets.token_hex(6)}_{index}", "type": "function",
           "function": {"name": call.name, "arguments": call.arguments}}
    return {"index": index, **out} if with_index else out


def _choice_extras(r: ChatResult) -> dict:
    out = {}
    if r.tool_call_errors:
        out["tool_call_error"] = r.tool_call_errors[0].to_wire()
    return out


def _format_status(params: ChatParams, results: list[ChatResult]) -> str | None:
    """Pantheon's response_format_status; "not_enforced" when a constrained answer did not
    close a complete JSON value (cut by max_tokens or a stop string)."""
    status = params.response_format_status or results[0].response_format_status
    wanted = (params.request.response_format or {}).get("type")
    if status in ("applied", "schema_downgraded") and wanted in ("json_object", "json_schema"):
        for r in results:
            try:
                json.loads(r.text)
            except ValueError:
                return "not_enforced"
    return status


def _top_level(params: ChatParams, results: list[ChatResult]) -> dict:
    out = {}
    status = _format_status(params, results)
    if status:
        out["response_format_status"] = status
    if params.n_status:
        out["n_status"] = params.n_status
    return out


@bp.post("/v1/chat/completions")
@endpoint("Chat completion (OpenAI-compatible); SSE when stream is true", body=CHAT_SCHEMA,
          ok={**json_object("id", "object", "model", "choices", "usage",
                            object={"const": "chat.completion"}, choices={"type": "array"}),
              "text/event-stream": {"type": "string"}},
          errors=(404, 422, 429, 500, 503, 504, 507))
async def chat_completions(request: Request):
    require_ready(request)
    body = json_body(request)
    params = parse_chat(body, request.app.ctx.config.limits)
    params.request.session_key = session_key(request, body)
    st = _check_model(request, params)
    if params.media:
        params.request.media = await media_bytes(params, request.app.ctx.config.limits)
    await count_prompt(request, st, params)
    sched = request.app.ctx.scheduler
    for attempt in (1, 2):
        async with sched.lease(params.model, deadline_ms=deadline_ms(request),
                               context_len=params.estimated_ctx()) as lease:
            if params.prompt_tokens is None and await _counted_too_big(request, lease, params) \
                    and attempt == 1:
                continue       # counted only now: lease again, for a context that fits it
            return await _answer(request, params, lease)


async def _counted_too_big(request: Request, lease, params: ChatParams) -> bool:
    """Count the prompt on the engine just loaded (the model was out of tier 1 when the
    request came): 422 past the window; True when the slot is too small for it."""
    count = getattr(lease.engine, "prompt_tokens", None)
    if count is None:
        return False
    try:
        params.prompt_tokens = await asyncio.to_thread(count, params.request)
    except EngineError as exc:
        raise engine_error(exc) from None
    window = request.app.ctx.scheduler.context_window(lease.model)
    if params.prompt_tokens >= window:
        raise ContextOverBudget(params.prompt_tokens, window)
    return params.prompt_tokens >= getattr(lease.engine, "n_ctx_per_slot", window)


async def _answer(request: Request, params: ChatParams, lease):
    sched = request.app.ctx.scheduler
    fmt = getattr(lease.engine, "format", None)
    if params.request.tools and params.request.tool_choice != "none" and \
            fmt is not None and fmt.tools is None:
        raise errors.InvalidRequest(f"The model '{params.model}' has no tool calling "
                                    "format", param="tools")
    reqs = choice_requests(params.request, params.n)
    if params.stream:
        return await _stream(request, params, lease, reqs)
    started = time.monotonic()
    try:
        results = await run_choices(lease.engine, reqs)
    except EngineError as exc:
        raise engine_error(exc, sched.context_window(lease.model)) from None
    inference_ms = (time.monotonic() - started) * 1000
    record(request, lease, results)
    placement = sched.placement_of(lease.model).to_wire()
    timings = merged_timings(results)
    timings.queue_ms += lease.queue_ms
    out = {
        "id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion",
        "created": int(time.time()), "model": params.model,
        "choices": [{"index": i, "message": _message(r), "finish_reason": r.finish_reason,
                     **({"logprobs": {"content": [lp.to_wire() for lp in r.logprobs]}}
                        if r.logprobs is not None else {}),
                     **_choice_extras(r)}
                    for i, r in enumerate(results)],
        "usage": usage(results, sched.context_window(lease.model)),
        **_top_level(params, results), **choice_seeds(reqs),
        "hypnos_telemetry": telemetry(lease, placement, inference_ms,
                                      engine_timings(timings)),
    }
    return json_response(out, headers=wait_headers(lease))


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def send_stream_error(response, base: dict, empty_choice: dict,
                            err: errors.HypnosError) -> None:
    """A failure after the stream started (spec 7.4): a chunk with finish_reason "error"
    and the error object, then [DONE]. A context_over_budget keeps its type and its KV
    numbers (Pantheon); anything else is a server_error."""
    error = {"message": err.message, "type": "server_error"}
    if isinstance(err, ContextOverBudget):
        error.update(type=err.type, code=None, kv_used=err.kv_used, kv_cap=err.kv_cap)
    await response.send(sse({**base, "choices": [{"index": 0, **empty_choice,
                                                  "finish_reason": "error"}],
                             "error": error}))
    await response.send("data: [DONE]\n\n")
    await response.eof()


async def _stream(request: Request, params: ChatParams, lease, reqs):
    base = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion.chunk",
            "created": int(time.time()), "model": params.model, **choice_seeds(reqs)}
    chunk = lambda index, delta, finish=None, **extra: sse(  # noqa: E731
        {**base, "choices": [{"index": index, "delta": delta, "finish_reason": finish,
                              **extra}]})
    response = await request.respond(content_type="text/event-stream",
                                     headers={"cache-control": "no-cache",
                                              **wait_headers(lease)})
    for i in range(len(reqs)):
        await response.send(chunk(i, {"role": "assistant", "content": ""}))
    calls = [0] * len(reqs)

    async def send_delta(index: int, d: ChatDelta) -> None:
        extra = ({"logprobs": {"content": [lp.to_wire() for lp in d.logprobs]}}
                 if d.logprobs else {})
        if d.reasoning:
            await response.send(chunk(index, {"reasoning_content": d.reasoning}, **extra))
        elif d.content:
            await response.send(chunk(index, {"content": d.content}, **extra))
        elif d.tool_call is not None:
            wire = _call_wire(d.tool_call, calls[index], with_index=True)
            calls[index] += 1
            await response.send(chunk(index, {"tool_calls": [wire]}, **extra))
        elif extra:
            await response.send(chunk(index, {}, **extra))

    started = time.monotonic()
    sched = request.app.ctx.scheduler
    try:
        results = await stream_choices(lease.engine, reqs, send_delta,
                                       lambda: response.send(": keep-alive\n\n"))
    except EngineError as exc:
        await send_stream_error(response, base, {"delta": {}},
                                engine_error(exc, sched.context_window(lease.model)))
        return None     # the response went out through request.respond()
    inference_ms = (time.monotonic() - started) * 1000
    record(request, lease, results)
    placement = sched.placement_of(lease.model).to_wire()
    timings = merged_timings(results)
    timings.queue_ms += lease.queue_ms
    tele = telemetry(lease, placement, inference_ms, engine_timings(timings))
    top = _top_level(params, results)
    used = usage(results, sched.context_window(lease.model))
    for i, r in enumerate(results):
        last = i == len(results) - 1
        extra = dict(usage=used, **top, hypnos_telemetry=tele) if last else {}
        await response.send(sse({**base, "choices": [{
            "index": i, "delta": {}, "finish_reason": r.finish_reason, **_choice_extras(r)}],
            **extra}))
    if params.include_usage:
        await response.send(sse({**base, "choices": [], "usage": used}))
    await response.send("data: [DONE]\n\n")
    await response.eof()
    return None
