"""Running one text-generation request as ``n`` engine calls, plain or streamed.

Shared by /v1/chat/completions and /v1/completions: choice ``i`` decodes with ``seed + i``
(Pantheon), all choices run at once (the engine queues those beyond its slots), the prompt
counts once in usage. Streaming hands each ``ChatDelta`` to the event loop as it is decoded,
sends keep-alive comments while nothing comes, and stops every choice at the next token when
the client goes away.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import secrets
import threading
from typing import Awaitable, Callable

from hypnos.engines.records import ChatDelta, ChatRequest, ChatResult, ChatTimings, ChoiceGroup
from hypnos.service.engine_call import run_engine

KEEPALIVE_SECS = 10.0


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


def choice_seeds(reqs: list[ChatRequest]) -> dict:
    """The response's record of batched choices (n > 1): each choice's seed, and that the
    choices were decoded together (reproducible as this same request, see choice_requests)."""
    if len(reqs) == 1:
        return {}
    return {"choices_batched": True, "choice_seeds": [r.seed for r in reqs]}


async def run_choices(engine, reqs: list[ChatRequest]) -> list[ChatResult]:
    cancel = threading.Event()
    return list(await asyncio.gather(*(run_engine(engine.chat, r, None, cancel=cancel)
                                       for r in reqs)))


async def stream_choices(engine, reqs: list[ChatRequest],
                         send_delta: Callable[[int, ChatDelta], Awaitable[None]],
                         send_keepalive: Callable[[], Awaitable[None]]) -> list[ChatResult]:
    """Run the choices, awaiting ``send_delta(index, delta)`` for each delta in decode
    order. Raises what an engine call raised (the others are cancelled first)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()

    def forward(index: int):
        return lambda delta: loop.call_soon_threadsafe(queue.put_nowait, (index, delta))

    tasks = [asyncio.ensure_future(run_engine(engine.chat, r, forward(i), cancel=cancel))
             for i, r in enumerate(reqs)]
    everything = asyncio.gather(*tasks)
    everything.add_done_callback(lambda _f: loop.call_soon_threadsafe(queue.put_nowait, None))
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), KEEPALIVE_SECS)
            except asyncio.TimeoutError:
                await send_keepalive()
                continue
            if item is None:
                break
            await send_delta(*item)
        return everything.result()
    except BaseException:
        cancel.set()                           # stop every choice at its next token
        await asyncio.wait(tasks)
        raise


def usage(results: list[ChatResult], window: int | None = None) -> dict:
    """The prompt once, completion tokens summed over the choices, the KV use of the first
    choice (the session's slot) against the model's context ``window`` (Pantheon's kv_cap:
    the same number /v1/models advertises as context_window)."""
    first = results[0]
    completion = sum(r.completion_tokens for r in results)
    out = {"prompt_tokens": first.prompt_tokens, "completion_tokens": completion,
           "total_tokens": first.prompt_tokens + completion,
           "prompt_tokens_details": {"cached_tokens": first.cached_tokens}}
    if first.kv_cap:
        out["kv_used"], out["kv_cap"] = first.kv_used, window or first.kv_cap
    return out


def merged_timings(results: list[ChatResult]) -> ChatTimings:
    return results[0].timings
