"""Which threads run llama.cpp's CPU compute, and for how long they live.

llama.cpp in llama-cpp-python (and llama-server) is built with OpenMP: each thread that runs a
graph becomes the master of its own libgomp team, whose worker threads stay parked for as long
as the master thread lives. libgomp counts those workers, and while it counts more threads
than the process has CPUs it stops spinning at barriers: a thread that reaches a barrier
early spins ~100 iterations, then sleeps on a futex, and every ggml operation ends at a
barrier. So one idle team elsewhere in the process (a second model that answered once, an
embedding call made on a request thread) slows every other model's decode: measured here on
Qwen2.5-Coder-0.5B with 2 threads on 2 cores, 27 tokens/s alone against 13 to 19 beside a
parked team (``bench/README.md``, ``--default-model``).

Hence two rules for llama compute: a decode loop's thread ends when it has been idle for
``IDLE_EXIT_S`` (``DecodeLoop``; the next job starts a new one), and a one-off computation
made for a caller (embeddings, rerank scores, a judgement) runs on a thread of its own that
ends with it (``on_own_thread``). A thread's exit frees its team, so only the threads that
are computing have one. Two models that do compute at the same time still share the cores;
short spinning is then the right thing, and it is what libgomp does.

A third: housekeeping beside the compute (the prompt cache's disk writer, which hashes and
writes tens of MB per entry) runs ``in_background``: on Linux at ``SCHED_IDLE``, so it takes a
core only when no compute thread wants it. At normal priority it preempts one ggml thread
and the other waits for it at every barrier: a 2,000-token prefill that followed a stash ran
at 194-200 tokens/s against 205-210 without one (server, 2 cores).
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

#: A decode thread with nothing to do for this long ends (its OpenMP team with it).
IDLE_EXIT_S = 0.25


def on_own_thread(fn: Callable[[], T], name: str = "llama-compute") -> T:
    """``fn()`` run on a new thread that ends when it returns; its result, or its exception
    raised here. Blocks the caller until then."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:           # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]                     # type: ignore[misc]
    return box["value"]                        # type: ignore[return-value]


def in_background() -> bool:
    """Put the calling thread at the lowest scheduling class there is (Linux ``SCHED_IDLE``:
    it runs when no other thread wants the core). Whether that took; elsewhere a no-op."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is None:
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))     # 0: this thread
    except OSError as exc:
        log.debug("could not lower a background thread: %s", exc)
        return False
    return True
