"""What /api/chat and /api/generate answer (`OllamaCodec`): one object, or NDJSON lines (one
per delta, ``done`` false) closed by a line with ``done`` true, the done reason and Ollama's
counters in nanoseconds; a refusal after the first line is a line with ``error``. The
closing object also carries ``hypnos_telemetry`` (Ollama's clients ignore a field they do
not know), as every other dialect's answer does."""
from __future__ import annotations

from datetime import UTC, datetime

from hypnos.engines.records import ChatDelta, ChatResult
from hypnos.service.errors import HypnosError
from hypnos.service.wire.codec import TurnEnd, call_arguments, ndjson_line

NDJSON = "application/x-ndjson"


def now() -> str:
    """Ollama's created_at: the time, UTC, ISO 8601 with a Z."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _stats(end: TurnEnd) -> dict:
    """Ollama's closing counters, in nanoseconds. ``prompt_eval_count`` counts the prompt
    tokens evaluated, as Ollama's does: a prefix reused from the cache is not among them."""
    r, t = end.first, end.first.timings
    return {"total_duration": int(end.total_ms * 1e6), "load_duration": int(end.load_ms * 1e6),
            "prompt_eval_count": r.prompt_tokens - r.cached_tokens,
            "prompt_eval_duration": int(t.prefill_ms * 1e6), "eval_count": r.completion_tokens,
            "eval_duration": int(t.decode_ms * 1e6)}


def _done_reason(r: ChatResult) -> str:
    return "length" if r.finish_reason == "length" else "stop"


def _call(name: str, arguments: str) -> dict:
    return {"function": {"name": name, "arguments": call_arguments(arguments)}}


class OllamaCodec:
    """``field``: "message" for /api/chat (a chat message per line), "response" for
    /api/generate (the text; a delta with neither text nor thinking sends no line)."""
    media_type = NDJSON
    stream_headers: dict[str, str] = {}
    keepalive: str | None = None

    def __init__(self, model: str, field: str):
        self.model, self.field = model, field

    def _closing(self, end: TurnEnd, piece: dict) -> dict:
        return {"model": self.model, "created_at": now(), **piece, "done": True,
                "done_reason": _done_reason(end.first), **_stats(end),
                "hypnos_telemetry": end.telemetry}

    def whole(self, end: TurnEnd) -> dict:
        r = end.first
        if self.field == "message":
            message: dict = {"role": "assistant", "content": r.text}
            if r.reasoning:
                message["thinking"] = r.reasoning
            if r.tool_calls:
                message["tool_calls"] = [_call(c.name, c.arguments) for c in r.tool_calls]
            return self._closing(end, {"message": message})
        return self._closing(end, {"response": r.text,
                                   **({"thinking": r.reasoning} if r.reasoning else {})})

    def head(self, seeds: tuple[int, ...]) -> list[str]:
        return []

    def _piece(self, d: ChatDelta) -> dict | None:
        if self.field == "message":
            msg: dict = {"role": "assistant", "content": d.content}
            if d.reasoning:
                msg["thinking"] = d.reasoning
            if d.tool_call is not None:
                msg["tool_calls"] = [_call(d.tool_call.name, d.tool_call.arguments)]
            return {"message": msg}
        if d.content or d.reasoning:
            return {"response": d.content, **({"thinking": d.reasoning} if d.reasoning else {})}
        return None

    def delta(self, index: int, d: ChatDelta) -> list[str]:
        piece = self._piece(d)
        if piece is None:
            return []
        return [ndjson_line({"model": self.model, "created_at": now(), **piece,
                             "done": False})]

    def tail(self, end: TurnEnd) -> list[str]:
        last = ({"message": {"role": "assistant", "content": ""}} if self.field == "message"
                else {"response": ""})
        return [ndjson_line(self._closing(end, last))]

    def refused(self, error: HypnosError) -> list[str]:
        return [ndjson_line({"error": error.message})]
