"""Which slot a client's retry gets while its cancelled prefill is still stopping (issue #36),
pure: ``SlotQueue._assign_locked`` over plain slots and jobs, no decoding."""
from __future__ import annotations

import collections
import threading

from hypnos.engines.llama.slots import Job, Slot, SlotQueue

PROMPT = list(range(100, 400))


class Queue(SlotQueue):
    def __init__(self, slots: list[Slot]):
        self.slots, self.waiting = slots, collections.deque()
        self.cond, self.closing = threading.Condition(threading.RLock()), False

    def offer(self, job: Job) -> Slot | None:
        self.waiting.append(job)
        self._assign_locked()
        return next((s for s in self.slots if s.job is job), None)


def job(prompt: list[int], stopping: bool = False) -> Job:
    stop = threading.Event()
    if stopping:
        stop.set()
    return Job(prompt=list(prompt), max_tokens=8, sampling=None, stop=stop)


def test_a_retry_waits_for_the_slot_its_cancelled_prefill_is_leaving():
    cancelled = Slot(0, tokens=PROMPT[:128], job=job(PROMPT, stopping=True))
    queue = Queue([cancelled, Slot(1, tokens=[1, 2, 3])])
    retry = job(PROMPT)
    assert queue.offer(retry) is None                # waits: slot 1 would start from 0
    other = job([5, 6, 7])
    assert queue.offer(other) is queue.slots[1]      # later jobs pass it
    cancelled.job = None                             # the decode thread freed slot 0
    queue._assign_locked()
    assert retry in (s.job for s in queue.slots) and cancelled.job is retry


def test_a_retry_does_not_wait_for_a_running_slot_or_a_shorter_prefix():
    running = Slot(0, tokens=PROMPT[:128], job=job(PROMPT))
    queue = Queue([running, Slot(1)])
    assert queue.offer(job(PROMPT)) is queue.slots[1]      # not stopping: no wait
    stopping = Slot(0, tokens=PROMPT[:10], job=job(PROMPT, stopping=True))
    queue = Queue([stopping, Slot(1, tokens=PROMPT[:200])])
    assert queue.offer(job(PROMPT)) is queue.slots[1]      # the free slot holds more
    foreign = Slot(0, tokens=PROMPT[:128], job=job(PROMPT, stopping=True), partition="bob")
    queue = Queue([foreign, Slot(1)])
    assert queue.offer(job(PROMPT)) is queue.slots[1]      # another key's prefix: no wait
