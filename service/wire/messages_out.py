"""What /v1/messages answers (`MessagesCodec`): Anthropic's message object of content blocks
(thinking, text, tool_use), or its SSE event sequence: message_start, each block's start /
deltas / stop, message_delta with the stop reason and usage, message_stop; pings while the
engine says nothing, and an ``error`` event when the turn is refused after the stream
started."""
from __future__ import annotations

import json
import secrets
from collections.abc import Callable

from hypnos.engines.records import ChatDelta, ChatResult
from hypnos.service import errors
from hypnos.service.wire.codec import SSE_HEADERS, TurnEnd, call_arguments, event_frame

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "repetition_loop": "end_turn", "cancelled": "end_turn"}


def _tool_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def stop_fields(r: ChatResult) -> dict:
    if r.finish_reason == "stop" and r.stop_sequence:
        return {"stop_reason": "stop_sequence", "stop_sequence": r.stop_sequence}
    reason = STOP_REASONS.get(r.finish_reason, "end_turn")
    return {"stop_reason": reason, "stop_sequence": None}


def usage(r: ChatResult) -> dict:
    """Anthropic counts the cached prefix apart from the input it had to read."""
    return {"input_tokens": r.prompt_tokens - r.cached_tokens,
            "output_tokens": r.completion_tokens,
            "cache_read_input_tokens": r.cached_tokens, "cache_creation_input_tokens": 0}


def blocks(r: ChatResult, single_call: bool) -> list[dict]:
    out: list[dict] = []
    if r.reasoning:
        out.append({"type": "thinking", "thinking": r.reasoning, "signature": ""})
    if r.text or not r.tool_calls:
        out.append({"type": "text", "text": r.text})
    calls = r.tool_calls[:1] if single_call else r.tool_calls
    out.extend({"type": "tool_use", "id": _tool_id(), "name": c.name,
                "input": call_arguments(c.arguments)} for c in calls)
    return out


def message(model: str, content: list[dict], usage_: dict, stop: dict) -> dict:
    return {"id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant",
            "model": model, "content": content, **stop, "usage": usage_}


class MessagesCodec:
    """A block opens when the kind of delta changes (thinking, text, one per tool call) and
    closes before the next one opens; ``single_call`` (disable_parallel_tool_use) keeps the
    first call only. ``prompt_tokens()`` is read when the stream opens (the prompt is counted
    inside the lease)."""
    media_type = "text/event-stream"
    stream_headers = SSE_HEADERS
    keepalive: str | None = event_frame("ping", {"type": "ping"})

    def __init__(self, model: str, single_call: bool,
                 prompt_tokens: Callable[[], int | None] = lambda: 0):
        self.model, self.single_call, self.prompt_tokens = model, single_call, prompt_tokens
        self.index = -1
        self.kind: str | None = None
        self.calls = 0

    def whole(self, end: TurnEnd) -> dict:
        r = end.first
        return {**message(self.model, blocks(r, self.single_call), usage(r), stop_fields(r)),
                "hypnos_telemetry": end.telemetry}

    def head(self, seeds: tuple[int, ...]) -> list[str]:
        start = message(self.model, [], {"input_tokens": self.prompt_tokens() or 0,
                                         "output_tokens": 0},
                        {"stop_reason": None, "stop_sequence": None})
        return [event_frame("message_start", {"type": "message_start", "message": start})]

    def _open(self, kind: str, block: dict) -> list[str]:
        out = self._close()
        self.index += 1
        self.kind = kind
        return [*out, event_frame("content_block_start", {
            "type": "content_block_start", "index": self.index, "content_block": block})]

    def _close(self) -> list[str]:
        if self.kind is None:
            return []
        self.kind = None
        return [event_frame("content_block_stop", {"type": "content_block_stop",
                                                   "index": self.index})]

    def _delta(self, delta: dict) -> str:
        return event_frame("content_block_delta", {
            "type": "content_block_delta", "index": self.index, "delta": delta})

    def delta(self, index: int, d: ChatDelta) -> list[str]:
        out: list[str] = []
        if d.reasoning:
            if self.kind != "thinking":
                out += self._open("thinking", {"type": "thinking", "thinking": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": d.reasoning}))
        elif d.content:
            if self.kind != "text":
                out += self._open("text", {"type": "text", "text": ""})
            out.append(self._delta({"type": "text_delta", "text": d.content}))
        elif d.tool_call is not None and not (self.single_call and self.calls):
            self.calls += 1
            out += self._open("tool_use", {"type": "tool_use", "id": _tool_id(),
                                           "name": d.tool_call.name, "input": {}})
            out.append(self._delta({"type": "input_json_delta", "partial_json": json.dumps(
                call_arguments(d.tool_call.arguments))}))
            out += self._close()
        return out

    def tail(self, end: TurnEnd) -> list[str]:
        r = end.first
        out: list[str] = []
        if self.index < 0:        # nothing was said: one empty text block, as Anthropic does
            out += self._open("text", {"type": "text", "text": ""})
        return [*out, *self._close(), event_frame("message_delta", {
            "type": "message_delta", "delta": stop_fields(r), "usage": usage(r),
            "hypnos_telemetry": end.telemetry}),
            event_frame("message_stop", {"type": "message_stop"})]

    def refused(self, error: errors.HypnosError) -> list[str]:
        return [event_frame("error", errors.anthropic_body(error.status, error.message))]
