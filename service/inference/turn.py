"""One chat turn, from the lease to the last byte, for every dialect.

    await chat_turn(caller, lease, request, codec, sink, stream=True)

The turn enters ``lease`` (the checked, counted chat lease the route made with the same
`Caller`), runs the request's ``n`` choices (`text.run_choices`, or `text.stream_choices`
with the codec's keep-alive frame while the engine says nothing), records the answer once
(the caller's metrics and the request's record), builds ``hypnos_telemetry``, and hands
everything to the dialect's codec (`wire.codec.ChatCodec`), whose frames go to ``sink``. A
refusal after the stream started (a `HypnosError`) ends the stream with the codec's error
frames; before it, it leaves the turn as the HTTP error it is. The wait headers go with the
answer or the stream's start. After-turn hooks (Ollama's keep_alive) run once the answer is
out: a hook that fails is logged and changes nothing in the answer.

The sink is where frames go (`FrameSink`): an HTTP response here (`http.sink`), a WebSocket
or an MCP reply later; the turn knows no transport.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from hypnos.engines.records import ChatDelta, ChatRequest, ChatResult
from hypnos.service.errors import HypnosError
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.leased import LeasedCall
from hypnos.service.inference.text import (choice_requests, run_choices, stream_choices,
                                           text_telemetry)
from hypnos.service.wire.codec import ChatCodec, TurnEnd

log = logging.getLogger(__name__)


class FrameSink(Protocol):
    """Where a turn's answer goes. A stream: ``open`` once, ``send`` each frame, ``close``;
    a whole answer: ``whole`` once. Each may block on the client (awaited on the loop)."""

    async def open(self, media_type: str, headers: dict[str, str]) -> None: ...

    async def send(self, frame: str) -> None: ...

    async def close(self) -> None: ...

    async def whole(self, body: dict, headers: dict[str, str]) -> None: ...


#: The request to run, or how to make it once the model is leased (an engine fact decides
#: it, or a session is bound to the leased engine).
RequestFor = ChatRequest | Callable[[LeasedCall], Awaitable[ChatRequest]]


async def chat_turn(caller: Caller, lease: AbstractAsyncContextManager[LeasedCall],
                    request: RequestFor, codec: ChatCodec, sink: FrameSink, *,
                    stream: bool, n: int = 1,
                    after: Sequence[Callable[[], None]] = ()) -> None:
    """Run one chat turn to its last byte (see the module's docstring). Raises the HTTP
    error of a refusal before the answer started (the lease's, the engine's); nothing once
    it started."""
    started = time.perf_counter()
    async with lease as call:
        req = request if isinstance(request, ChatRequest) else await request(call)
        reqs = choice_requests(req, n)
        seeds = tuple(r.seed for r in reqs if r.seed is not None) if n > 1 else ()
        if stream:
            await _stream(caller, call, reqs, seeds, codec, sink, started)
        else:
            results = await run_choices(call, reqs)
            end = _finish(caller, call, results, seeds, started)
            await sink.whole(codec.whole(end), call.wait_headers())
    for hook in after:
        try:
            hook()
        except Exception:
            log.exception("an after-turn hook failed; the answer stands")


async def _stream(caller: Caller, call: LeasedCall, reqs: list[ChatRequest],
                  seeds: tuple[int, ...], codec: ChatCodec, sink: FrameSink,
                  started: float) -> None:
    await sink.open(codec.media_type, {**codec.stream_headers, **call.wait_headers()})

    async def send(frames: list[str]) -> None:
        for frame in frames:
            await sink.send(frame)

    async def send_delta(index: int, d: ChatDelta) -> None:
        await send(codec.delta(index, d))

    async def keepalive() -> None:
        if codec.keepalive is not None:
            await sink.send(codec.keepalive)

    await send(codec.head(seeds))
    try:
        results = await stream_choices(call, reqs, send_delta, keepalive)
    except HypnosError as exc:
        await send(codec.refused(exc))
        await sink.close()
        return
    await send(codec.tail(_finish(caller, call, results, seeds, started)))
    await sink.close()


def _finish(caller: Caller, call: LeasedCall, results: list[ChatResult],
            seeds: tuple[int, ...], started: float) -> TurnEnd:
    """Record the answer once, and what the codec needs to close it."""
    record_answer(caller, call, results)
    return TurnEnd(results, text_telemetry(call, results), call.window,
                   call.lease.tier_switch_ms, (time.perf_counter() - started) * 1000, seeds)


def record_answer(caller: Caller, call: LeasedCall, results: list[ChatResult]) -> None:
    """Stats and metrics from the first choice; the request is charged (keys, request log)
    for the prompt once and every choice's completion."""
    first = results[0]
    if first.timings.prefill_tokens_per_s:
        call.lease.prefill_tokens_per_s = first.timings.prefill_tokens_per_s
    caller.metrics.chat(call.model.id, first.timings)
    for r in results:
        caller.metrics.speculative(call.model.id, r.speculative)
    caller.record.chat(first, sum(r.completion_tokens for r in results))
