"""POST /v1/chat/completions (spec 7, plus the Pantheon / Fermion request features the
chat issue names): non-streaming and SSE streaming, n choices, tools, thinking, logprobs."""
from __future__ import annotations

import json
import secrets
import time

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines.records import ChatDelta, ChatRequest, ChatResult, ToolCall
from hypnos.service import errors
from hypnos.service.http.caller import caller_of, session_key
from hypnos.service.wire.chat import ChatBody, ChatParams, parse_chat
from hypnos.service.inference.leased import LeasedCall
from hypnos.service.inference.chat_checks import chat_lease
from hypnos.service.inference.text import (choice_requests, choice_seeds, record,
                                           run_choices, stream_choices, text_telemetry, usage)
from hypnos.service.http.sse import send_stream_error, sse
from hypnos.service.wire.body import json_body
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.state import state_of

bp = Blueprint("chat")


def _message(r: ChatResult) -> dict:
    msg: dict = {"role": "assistant", "content": r.text}
    if r.reasoning:
        msg["reasoning_content"] = r.reasoning
    if r.tool_calls:
        msg["tool_calls"] = [_call_wire(c, i) for i, c in enumerate(r.tool_calls)]
    return msg


def _call_wire(call: ToolCall, index: int, with_index: bool = False) -> dict:
    out = {"id": f"call_{secrets.token_hex(6)}_{index}", "type": "function",
           "function": {"name": call.name, "arguments": call.arguments}}
    return {"index": index, **out} if with_index else out


def _choice_extras(r: ChatResult) -> dict:
    out: dict[str, object] = {}
    if r.tool_call_errors:
        out["tool_call_error"] = r.tool_call_errors[0].to_wire()
    if r.tool_call_truncated:
        out["tool_call_truncated"] = True
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
@needs_ready
@endpoint("Chat completion (OpenAI-compatible); SSE when stream is true", body=ChatBody,
          ok={**json_object("id", "object", "model", "choices", "usage",
                            object={"const": "chat.completion"}, choices={"type": "array"}),
              "text/event-stream": {"type": "string"}},
          errors=(404, 422, 429, 500, 503, 507))
async def chat_completions(request: Request) -> HTTPResponse | None:
    body = json_body(request)
    params = parse_chat(body, state_of(request).config.limits)
    params.request.session_key = session_key(request, body)
    async with chat_lease(caller_of(request), params) as call:
        reqs = choice_requests(params.request, params.n)
        if params.stream:
            return await _stream(request, params, call, reqs)
        results = await run_choices(call, reqs)
        record(caller_of(request), call, results)
        out = {
            "id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion",
            "created": int(time.time()), "model": params.model,
            "choices": [{"index": i, "message": _message(r), "finish_reason": r.finish_reason,
                         **({"logprobs": {"content": [lp.to_wire() for lp in r.logprobs]}}
                            if r.logprobs is not None else {}),
                         **_choice_extras(r)}
                        for i, r in enumerate(results)],
            "usage": usage(results, call.window),
            **_top_level(params, results), **choice_seeds(reqs),
            "hypnos_telemetry": text_telemetry(call, results),
        }
        return json_response(out, headers=call.wait_headers())


async def _stream(request: Request, params: ChatParams, call: LeasedCall,
                  reqs: list[ChatRequest]) -> HTTPResponse | None:
    base = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion.chunk",
            "created": int(time.time()), "model": params.model, **choice_seeds(reqs)}
    chunk = lambda index, delta, finish=None, **extra: sse(  # noqa: E731
        {**base, "choices": [{"index": index, "delta": delta, "finish_reason": finish,
                              **extra}]})
    response = await request.respond(content_type="text/event-stream",
                                     headers={"cache-control": "no-cache",
                                              **call.wait_headers()})
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

    try:
        results = await stream_choices(call, reqs, send_delta,
                                       lambda: response.send(": keep-alive\n\n"))
    except errors.HypnosError as exc:
        await send_stream_error(response, base, {"delta": {}}, exc)
        return None     # the response went out through request.respond()
    record(caller_of(request), call, results)
    tele = text_telemetry(call, results)
    top = _top_level(params, results)
    used = usage(results, call.window)
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
