"""The output side of a chat dialect: a codec turns the typed pieces of one chat turn (the
engine's ``ChatDelta`` stream, its ``ChatResult`` and the turn's facts, `TurnEnd`) into the
dialect's frames, and knows nothing else: no lease, no engine, no HTTP response. The turn
(`inference.turn`) drives every codec the same way:

    whole answer:   whole(end)                         -> the JSON body
    stream:         head(seeds), delta(i, d)..., tail(end)   -> frames, in order
    a refusal mid-stream:  ... delta(i, d)..., refused(error) -> the last frames

A frame is the text that goes on the wire as it is (an SSE event, an NDJSON line); the
dialect's keep-alive frame is sent while the engine says nothing. Also here: the one parser
of a tool call's arguments for the dialects that answer them as an object (Anthropic,
Ollama), and the frame text helpers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from hypnos.engines.records import ChatDelta, ChatResult
from hypnos.service.errors import HypnosError

SSE_HEADERS = {"cache-control": "no-cache"}


@dataclass(frozen=True)
class TurnEnd:
    """What a finished turn hands its codec: the choices' results (one per choice, in
    order) and the facts around them."""
    results: list[ChatResult]
    telemetry: dict             # hypnos_telemetry (spec section 5)
    window: int                 # the model's context window (what /v1/models advertises)
    load_ms: float              # the lease's tier switch (0 when the model was in place)
    total_ms: float             # from the turn's start (before the lease) to its end
    seeds: tuple[int, ...] = ()     # each choice's seed when n > 1, else empty

    @property
    def first(self) -> ChatResult:
        return self.results[0]


class ChatCodec(Protocol):
    """One dialect's answer. Methods are pure but for the codec's own stream state (open
    blocks, counters): called in the order above, on one turn, from one task."""
    media_type: str                 # a stream's content type
    stream_headers: dict[str, str]  # a stream's own headers (the wait headers are added)
    keepalive: str | None           # the frame sent while nothing comes (None: nothing)

    def head(self, seeds: tuple[int, ...]) -> list[str]: ...

    def delta(self, index: int, d: ChatDelta) -> list[str]: ...

    def tail(self, end: TurnEnd) -> list[str]: ...

    def refused(self, error: HypnosError) -> list[str]: ...

    def whole(self, end: TurnEnd) -> dict: ...


def call_arguments(arguments: str) -> dict:
    """A tool call's arguments as the object the dialects that answer an object need (the
    engine hands them over as JSON text): {} when the text is empty, not JSON or not an
    object, never an error (the call itself was already said)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def data_frame(payload: dict | str) -> str:
    """An SSE event with data only (OpenAI's chat and legacy completions)."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n"


def event_frame(name: str, payload: dict) -> str:
    """A named SSE event (Anthropic's Messages, OpenAI's Responses)."""
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


def ndjson_line(payload: dict) -> str:
    """One NDJSON line (Ollama)."""
    return json.dumps(payload, ensure_ascii=False) + "\n"


SSE_COMMENT_KEEPALIVE = ": keep-alive\n\n"
DONE = data_frame("[DONE]")
