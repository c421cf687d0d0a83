"""Tokens handed on in batches, not one thread wake-up per token: the engine's ``TokenEvents``
(decode thread -> the caller's thread) and the service's ``DeltaPipe`` (engine threads -> the
event loop). Each batch keeps every event, in order; what wakes the reader is the contract."""
import asyncio
from collections import deque
import threading
import time

import pytest

from hypnos.engines.chat_format.stream import AnswerSplitter, StopMatcher
from hypnos.engines.llama.reader import AnswerReader, TokenEvents, collect
from hypnos.engines.llama.sampling import Sampling
from hypnos.engines.llama.slots import Job, SlotQueue
from hypnos.service.inference.text import DeltaPipe


def job_with(events: TokenEvents) -> Job:
    return Job(prompt=[1], max_tokens=8, sampling=Sampling(), stop=threading.Event(),
               events=events)


def test_take_returns_every_queued_event_in_order():
    q = TokenEvents()
    for i in range(5):
        q.put(("token", bytes([65 + i]), None))
    q.put(("done", "length"))
    assert q.take(1.0, eager=False) == [("token", bytes([65 + i]), None) for i in range(5)] \
        + [("done", "length")]
    assert q.take(0.01, eager=True) == []


def put_later(q: TokenEvents, item, delay: float = 0.02) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(delay), q.put(item)))
    t.start()
    return t


def test_a_token_does_not_wake_a_lazy_reader_but_the_end_of_the_job_does():
    q = TokenEvents()
    t = put_later(q, ("token", b"a", None))
    t0 = time.perf_counter()
    assert q.take(0.3, eager=False) == [("token", b"a", None)]
    assert time.perf_counter() - t0 >= 0.29          # waited out its timeout
    t.join()
    t = put_later(q, ("done", "stop"))
    t0 = time.perf_counter()
    assert q.take(30.0, eager=False) == [("done", "stop")]
    assert time.perf_counter() - t0 < 10             # woken, long before the timeout
    t.join()


def test_a_token_wakes_an_eager_reader():
    q = TokenEvents()
    t = put_later(q, ("token", b"a", None))
    t0 = time.perf_counter()
    assert q.take(30.0, eager=True) == [("token", b"a", None)]
    assert time.perf_counter() - t0 < 10
    t.join()


def test_collect_in_batches_delivers_each_token_as_one_at_a_time_would():
    """The multibyte character split over tokens still arrives whole, each token is its own
    delta, and the count is the tokens'."""
    q = TokenEvents()
    for value in [b"caf\xc3", b"\xa9 \xe2\x82", b"\xac", b"\xf0\x9f"]:
        q.put(("token", value, None))
    q.put(("done", "length"))
    pieces: list[str] = []
    reader = AnswerReader(AnswerSplitter(), StopMatcher([]),
                          lambda delta: pieces.append(delta.content), logprobs=False)
    finish, delivered = collect(None, job_with(q), reader, threading.Event())
    assert pieces == ["caf", "é ", "€"]
    assert (reader.content, finish, delivered) == ("café €", "length", 4)


def test_collect_stops_at_a_stop_string_inside_a_batch():
    q = TokenEvents()
    for value in [b"one ", b"two ", b"STOP", b" three"]:
        q.put(("token", value, None))
    q.put(("done", "length"))
    reader = AnswerReader(AnswerSplitter(), StopMatcher(["STOP"]), None, logprobs=False)
    job = job_with(q)
    slots = SlotQueue()                              # the queue a DecodeLoop sits on
    slots.slots, slots.waiting, slots.closing = [], deque(), False
    slots.cond = threading.Condition()
    finish, delivered = collect(slots, job, reader, threading.Event())
    assert (reader.content, finish, delivered) == ("one two ", "stop", 3)
    assert job.stop.is_set()                         # the decode thread frees the slot


def test_delta_pipe_hands_a_burst_over_in_one_take_and_in_order():
    async def main():
        pipe = DeltaPipe(asyncio.get_running_loop())
        woken = []
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: (woken.append(1), real(*a))  # type: ignore
        worker = threading.Thread(target=lambda: [pipe.put(i) for i in range(100)])
        worker.start()
        worker.join()
        got = await pipe.take(5)
        pipe.put("late")
        got_late = await pipe.take(5)
        loop.call_soon_threadsafe = real  # type: ignore
        return got, got_late, len(woken)
    got, late, wakes = asyncio.run(main())
    assert got == list(range(100)) and late == ["late"]
    assert wakes == 2                                # one per burst, not one per delta


def test_delta_pipe_take_times_out_when_nothing_comes():
    async def main():
        pipe = DeltaPipe(asyncio.get_running_loop())
        with pytest.raises(TimeoutError):
            await pipe.take(0.01)
    asyncio.run(main())
