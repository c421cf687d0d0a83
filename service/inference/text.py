"""Text generation under one lease: /v1/chat/completions and /v1/completions.

``text_lease`` is the chat path's one lease: the model is checked before anything loads, the
lease is sized from an estimate for a cold load, and the prompt is counted once on the
loaded tokenizer inside it (``Scheduler.lease(fit=...)``): past the model's window it is the
422, past the loaded slot the model is rebuilt for it, still under the same lease.

A request runs as ``n`` engine calls: choice ``i`` decodes with ``seed + i`` (Pantheon), all
choices run at once (the engine queues those beyond its slots), the prompt counts once in
usage. Streaming hands each ``ChatDelta`` to the event loop as it is decoded (``DeltaPipe``:
one wake-up of the loop per batch of deltas), sends keep-alive comments while nothing comes,
and stops every choice at the next token when the client goes away.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import secrets
import threading
from contextlib import asynccontextmanager
from typing import cast
from collections.abc import AsyncIterator, Awaitable, Callable

from hypnos.engines.errors import EngineError
from hypnos.engines.protocols import ChatEngine, Engine
from hypnos.engines.records import ChatDelta, ChatRequest, ChatResult, ChatTimings, ChoiceGroup
from hypnos.service import errors
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.capabilities import CHAT, require
from hypnos.service.inference.leased import LeasedCall, leased
from hypnos.service.observe.record import current_record
from hypnos.service.observe.telemetry import engine_timings
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.scheduler import Fit, Scheduler
from hypnos.service.wire.chat import ChatParams
from hypnos.service.wire.openai_out import usage  # noqa: F401  (its old home)

KEEPALIVE_SECS = 10.0


def check_text_model(sched: Scheduler, model_id: str, tools_active: bool = False
                     ) -> ModelState:
    """The model serves text generation, and a tool format when tools are sent: the one
    tool-format check, on the config before any load (a loaded engine's format has no tool
    dialect only when the config's tool_format is "none")."""
    st = require(sched, model_id, CHAT)
    if tools_active and st.cfg.tool_format == "none":
        raise errors.InvalidRequest(f"The model '{model_id}' has no tool calling format; "
                                    "send tool_choice \"none\" or no tools", param="tools")
    return st


@asynccontextmanager
async def text_lease(caller: Caller, model_id: str, estimate: int,
                     counted: Callable[[ChatEngine], int | None] | None = None
                     ) -> AsyncIterator[LeasedCall]:
    """One lease of a checked text model. ``estimate`` sizes a cold load; ``counted(engine)``
    (blocking, run in a thread) counts the prompt on the loaded engine and returns the
    per-slot context it needs when the loaded slot is too small, else None; it raises the
    422 past the window."""
    fit: Fit | None = None
    if counted is not None:
        count = counted

        async def fit(engine: Engine) -> int | None:
            try:         # a chat engine: the model was checked before the lease
                return await asyncio.to_thread(count, cast(ChatEngine, engine))
            except EngineError as exc:
                raise errors.from_engine(exc, param="messages") from None
    async with leased(caller, model_id, CHAT, checked=True, context_len=estimate,
                      fit=fit) as call:
        yield call


def chat_counter(window: int, params: ChatParams
                 ) -> Callable[[ChatEngine], int | None] | None:
    """``text_lease``'s count for a chat request (``ChatParams``): the exact prompt size from
    the loaded tokenizer and template, so a long prompt of short words does not force a
    context rebuild that drops the prefix cache; the 422 past ``window``; the context to
    rebuild for when the loaded slot cannot hold the prompt. None with num_ctx (the client
    sized the context itself)."""
    if params.num_ctx is not None:
        return None

    def counted(engine: ChatEngine) -> int | None:
        params.prompt_tokens = engine.prompt_tokens(params.request)
        if params.prompt_tokens >= window:
            raise errors.ContextOverBudget(params.prompt_tokens, window)
        return params.estimated_ctx() if params.prompt_tokens >= engine.n_ctx_per_slot else None
    return counted


def choice_requests(req: ChatRequest, n: int) -> list[ChatRequest]:
    """One request per choice; with n > 1 choice i uses seed + i (a random base seed when
    none was sent). The choices form one ``ChoiceGroup``: the engine starts them together and
    in order, so the same request (same n, same seed) gives the same choices again on the
    same build. A choice is not always bit-equal to a single request with seed + i: llama.cpp
    decodes the choices in one batch, and its CPU kernels may round another batch shape
    differently."""
    if n == 1:
        return [req]
    base = req.seed if req.seed is not None else random.getrandbits(31)
    key = secrets.token_hex(8)
    # Only the first choice keeps the session binding (one slot per session).
    return [dataclasses.replace(req, seed=base + i, session_key=req.session_key if i == 0
                                else None, group=ChoiceGroup(key, n, i)) for i in range(n)]


def partitioned(reqs: list[ChatRequest]) -> list[ChatRequest]:
    """``reqs``, each in the partition of the key that sent it (every chat and completion
    reaches the engine through here): it reuses only that key's cached prefixes and
    answers. One partition ("") when keys are off."""
    record = current_record()
    for req in reqs:
        req.partition = record.owner if record is not None else ""
    return reqs


async def run_choices(call: LeasedCall, reqs: list[ChatRequest]) -> list[ChatResult]:
    """Every choice at once under the lease; an engine error becomes its HTTP error."""
    window = call.window
    reqs = partitioned(reqs)
    return list(await asyncio.gather(*(call.run(call.chat.chat, r, None, window=window)
                                       for r in reqs)))


class DeltaPipe:
    """Deltas from the engine threads to the event loop, in decode order: ``put`` (any
    thread, never blocks) wakes the loop only when the pipe was empty, so the deltas of one
    engine batch cost one wake-up; ``take`` (the loop) returns all that are there."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.lock = threading.Lock()
        self.items: list = []
        self.ready = asyncio.Event()

    def put(self, item: tuple[int, ChatDelta] | None) -> None:
        with self.lock:
            self.items.append(item)
            first = len(self.items) == 1
        if first:
            self.loop.call_soon_threadsafe(self.ready.set)

    async def take(self, timeout: float) -> list:
        """What was put since the last take, waiting up to ``timeout`` seconds for it
        (TimeoutError past it); may return [] after a wake-up whose items a take already
        had."""
        await asyncio.wait_for(self.ready.wait(), timeout)
        with self.lock:
            items, self.items = self.items, []
            self.ready.clear()
        return items


async def stream_choices(call: LeasedCall, reqs: list[ChatRequest],
                         send_delta: Callable[[int, ChatDelta], Awaitable[None]],
                         send_keepalive: Callable[[], Awaitable[None]]) -> list[ChatResult]:
    """Run the choices, awaiting ``send_delta(index, delta)`` for each delta in decode
    order. Raises the HTTP error of what an engine call raised (the others are stopped
    first)."""
    pipe = DeltaPipe(asyncio.get_running_loop())
    window = call.window
    reqs = partitioned(reqs)

    def forward(index: int) -> Callable[[ChatDelta], None]:
        return lambda delta: pipe.put((index, delta))

    tasks = [asyncio.ensure_future(call.run(call.chat.chat, r, forward(i), window=window))
             for i, r in enumerate(reqs)]
    everything = asyncio.gather(*tasks)
    everything.add_done_callback(lambda _f: pipe.put(None))
    try:
        while True:
            try:
                items = await pipe.take(KEEPALIVE_SECS)
            except TimeoutError:
                await send_keepalive()
                continue
            for item in items:
                if item is None:
                    return everything.result()
                await send_delta(*item)
    except BaseException:
        call.cancel.set()                      # stop every choice at its next token
        await asyncio.wait(tasks)
        raise


def text_telemetry(call: LeasedCall, results: list[ChatResult]) -> dict:
    """hypnos_telemetry: the first choice's engine timings plus the lease's queue time (a
    copy: the result's own timings stay as the engine gave them)."""
    timings: ChatTimings = dataclasses.replace(results[0].timings)
    timings.queue_ms += call.lease.queue_ms
    out = call.telemetry(engine_timings(timings))
    if results[0].speculative:
        out["speculative"] = dict(results[0].speculative)
    if results[0].cached_from:      # the slot's, the prompt cache's RAM and disk tiers'
        out["cached_from"] = dict(results[0].cached_from)
    if results[0].parting is not None:      # where the prompt parted from its key's cache
        out["prompt_parting"] = dict(results[0].parting)
    return out
