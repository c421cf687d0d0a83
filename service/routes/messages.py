"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API (Claude Code,
the Anthropic SDKs) on every chat model of the pool. The body is translated into a chat
request (`wire.messages`), runs under the chat path's one lease, and is rendered back as
content blocks, or streamed as Anthropic's event sequence. Errors on these routes take
Anthropic's envelope (`errors.error_response`)."""
from __future__ import annotations

import json
import secrets

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines.records import ChatDelta, ChatResult
from hypnos.service import errors
from hypnos.service.http.caller import caller_of
from hypnos.service.wire.body import json_body
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.inference.chat_checks import chat_lease, prompt_tokens
from hypnos.service.inference.text import (record, run_choices, stream_choices,
                                           text_telemetry)
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.messages import CountTokensBody, MessagesBody, count_body, to_chat_body
from hypnos.service.state import state_of
from collections.abc import Awaitable, Callable
from typing import Any
from hypnos.service.inference.leased import LeasedCall
from hypnos.service.wire.chat import ChatParams

bp = Blueprint("messages")

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "repetition_loop": "end_turn", "cancelled": "end_turn"}


def _tool_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def _input(arguments: str) -> dict:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _stop(r: ChatResult) -> dict:
    if r.finish_reason == "stop" and r.stop_sequence:
        return {"stop_reason": "stop_sequence", "stop_sequence": r.stop_sequence}
    reason = STOP_REASONS.get(r.finish_reason, "end_turn")
    return {"stop_reason": reason, "stop_sequence": None}


def _usage(r: ChatResult) -> dict:
    """Anthropic counts the cached prefix apart from the input it had to read."""
    return {"input_tokens": r.prompt_tokens - r.cached_tokens,
            "output_tokens": r.completion_tokens,
            "cache_read_input_tokens": r.cached_tokens, "cache_creation_input_tokens": 0}


def _blocks(r: ChatResult, single_call: bool) -> list[dict]:
    out: list[dict] = []
    if r.reasoning:
        out.append({"type": "thinking", "thinking": r.reasoning, "signature": ""})
    if r.text or not r.tool_calls:
        out.append({"type": "text", "text": r.text})
    calls = r.tool_calls[:1] if single_call else r.tool_calls
    out.extend({"type": "tool_use", "id": _tool_id(), "name": c.name,
                "input": _input(c.arguments)} for c in calls)
    return out


def _message(model: str, content: list[dict], usage: dict, stop: dict) -> dict:
    return {"id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant",
            "model": model, "content": content, **stop, "usage": usage}


@bp.post("/v1/messages")
@needs_ready
@endpoint("Anthropic Messages: a chat turn as content blocks; Anthropic's SSE events when "
          "stream is true", body=MessagesBody,
          ok={**json_object("id", "type", "role", "content", "stop_reason", "usage",
                            type={"const": "message"}, content={"type": "array"}),
              "text/event-stream": {"type": "string"}},
          errors=(401, 404, 422, 429, 500, 503, 507))
async def messages(request: Request) -> HTTPResponse | None:
    wire, chat = to_chat_body(json_body(request))
    params = parse_chat(chat, state_of(request).config.limits)
    single = bool(wire.tool_choice and wire.tool_choice.disable_parallel_tool_use)
    async with chat_lease(caller_of(request), params) as call:
        if params.stream:
            return await _stream(request, params, call, single)
        (result,) = await run_choices(call, [params.request])
        record(caller_of(request), call, [result])
        out = _message(params.model, _blocks(result, single), _usage(result),
                       _stop(result))
        out["hypnos_telemetry"] = text_telemetry(call, [result])
        return json_response(out, headers=call.wait_headers())


def event(name: str, payload: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


class BlockStream:
    """Anthropic's content blocks over SSE: a block opens when the kind of delta changes
    (thinking, text, one per tool call) and closes before the next one opens."""

    def __init__(self, send: Callable[[str], Awaitable[Any]], single_call: bool):
        self.send = send
        self.single_call = single_call
        self.index = -1
        self.kind: str | None = None
        self.calls = 0

    async def _open(self, kind: str, block: dict) -> None:
        await self.close()
        self.index += 1
        self.kind = kind
        await self.send(event("content_block_start", {
            "type": "content_block_start", "index": self.index, "content_block": block}))

    async def open_text(self) -> None:
        await self._open("text", {"type": "text", "text": ""})

    async def close(self) -> None:
        if self.kind is not None:
            await self.send(event("content_block_stop", {"type": "content_block_stop",
                                                         "index": self.index}))
            self.kind = None

    async def _delta(self, delta: dict) -> None:
        await self.send(event("content_block_delta", {
            "type": "content_block_delta", "index": self.index, "delta": delta}))

    async def feed(self, d: ChatDelta) -> None:
        if d.reasoning:
            if self.kind != "thinking":
                await self._open("thinking", {"type": "thinking", "thinking": ""})
            await self._delta({"type": "thinking_delta", "thinking": d.reasoning})
        elif d.content:
            if self.kind != "text":
                await self._open("text", {"type": "text", "text": ""})
            await self._delta({"type": "text_delta", "text": d.content})
        elif d.tool_call is not None and not (self.single_call and self.calls):
            self.calls += 1
            await self._open("tool_use", {"type": "tool_use", "id": _tool_id(),
                                          "name": d.tool_call.name, "input": {}})
            await self._delta({"type": "input_json_delta",
                               "partial_json": json.dumps(_input(d.tool_call.arguments))})
            await self.close()


async def _stream(request: Request, params: ChatParams, call: LeasedCall,
                  single: bool) -> HTTPResponse | None:
    response = await request.respond(content_type="text/event-stream",
                                     headers={"cache-control": "no-cache",
                                              **call.wait_headers()})
    prompt = params.prompt_tokens or 0
    start = _message(params.model, [], {"input_tokens": prompt, "output_tokens": 0},
                     {"stop_reason": None, "stop_sequence": None})
    await response.send(event("message_start", {"type": "message_start", "message": start}))
    blocks = BlockStream(response.send, single)

    async def send_delta(_index: int, d: ChatDelta) -> None:
        await blocks.feed(d)

    async def ping() -> None:
        await response.send(event("ping", {"type": "ping"}))

    try:
        (result,) = await stream_choices(call, [params.request], send_delta, ping)
    except errors.HypnosError as exc:
        await response.send(event("error", errors.anthropic_body(exc.status, exc.message)))
        await response.eof()
        return None
    record(caller_of(request), call, [result])
    if blocks.index < 0:          # nothing was said: one empty text block, as Anthropic does
        await blocks.open_text()
    await blocks.close()
    await response.send(event("message_delta", {
        "type": "message_delta", "delta": _stop(result), "usage": _usage(result),
        "hypnos_telemetry": text_telemetry(call, [result])}))
    await response.send(event("message_stop", {"type": "message_stop"}))
    await response.eof()
    return None


@bp.post("/v1/messages/count_tokens")
@needs_ready
@endpoint("Anthropic's token count of a Messages request, by the model's own tokenizer and "
          "chat template (loads the model)", body=CountTokensBody,
          ok=json_object("input_tokens"), errors=(401, 404, 429, 500, 503, 507))
async def count_tokens(request: Request) -> HTTPResponse:
    params = parse_chat(count_body(json_body(request)), state_of(request).config.limits)
    count, headers = await prompt_tokens(caller_of(request), params)
    return json_response({"input_tokens": count}, headers=headers)
