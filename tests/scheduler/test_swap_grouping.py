"""Grouped swaps (anti-thrash), with a fake engine: two models that fit tier 1 only one at a
time, under load. A request for the other model holds the resident model's new requests and
waits (at most limits.swap_wait_ms) for its admitted ones; the waiting requests then go as a
group. Loads are counted to show there is no thrash, and the order in which requests end to
show who waited for whom (no upper bound on a duration: a slow machine must not fail them).
A prefetch or a move meets the same gates as a request."""
import asyncio
import itertools
import time

import pytest

from hypnos.planner.types import Tier
from hypnos.service.refusals import LoadRefused
from fakes import FakeEffects, Gated
from test_scheduler import make, model

pytestmark = pytest.mark.anyio


def loads(fx) -> list[str]:
    return [mid for op, mid in fx.log if op == "load"]


def two_models(swap_wait_ms=2000, a_slots=1):
    fx = FakeEffects()
    # Tier 1 holds one of them at a time.
    sched = make([(model("a", slots=a_slots), 600), (model("b"), 600)], fx)
    sched.config.limits.swap_wait_ms = swap_wait_ms
    return sched, fx


ORDER = itertools.count()      # events of one test, in the order they happen


async def request(sched, fx, mid, secs, done: list):
    """One request for ``mid`` running ``secs``; (mid, asked, ended) in ``done``, both from
    ORDER."""
    arrived = next(ORDER)
    async with sched.lease(mid):
        fx.serving.add(mid)
        await asyncio.sleep(secs)
        fx.serving.discard(mid)
    done.append((mid, arrived, next(ORDER)))


async def test_alternating_requests_swap_in_groups_not_per_request():
    sched, fx = two_models()
    done = []
    tasks = []
    for _ in range(8):                     # a, b, a, b, ... all arriving together
        for mid in ("a", "b"):
            tasks.append(asyncio.create_task(request(sched, fx, mid, 0.02, done)))
        await asyncio.sleep(0.001)
    await asyncio.gather(*tasks)
    assert len(done) == 16
    assert len(loads(fx)) <= 4, loads(fx)         # per request it would be 16
    assert fx.violations == []                      # never unloaded while serving


async def test_a_busy_model_does_not_starve_the_other():
    """"a" is kept busy by overlapping requests that never leave it idle; "b" still gets
    its turn (within swap_wait_ms: past it "b" would be a 507), after the "a" requests
    admitted before it and before every one that arrived after it, which are served after
    it as one group."""
    sched, fx = two_models(swap_wait_ms=30_000, a_slots=4)   # "a" runs requests side by side
    done, stop = [], asyncio.Event()
    tasks = []

    async def keep_a_busy():
        while not stop.is_set():
            tasks.append(asyncio.create_task(request(sched, fx, "a", 0.05, done)))
            await asyncio.sleep(0.02)
    feeder = asyncio.create_task(keep_a_busy())
    await asyncio.sleep(0.2)
    await request(sched, fx, "b", 0.01, done)
    stop.set()
    await feeder
    await asyncio.gather(*tasks)
    assert loads(fx) == ["a", "b", "a"]     # one swap there, one back: no thrash
    _, b_asked, b_ended = next(r for r in done if r[0] == "b")
    later_a = [r for r in done if r[0] == "a" and r[1] > b_asked]
    assert later_a and all(ended > b_ended for _, _, ended in later_a)  # held, served after
    assert fx.violations == []


async def test_past_the_bound_it_is_507_and_the_held_requests_go_on():
    sched, fx = two_models(swap_wait_ms=300, a_slots=2)
    release = asyncio.Event()

    async def endless_a():
        async with sched.lease("a"):
            await release.wait()
    first = asyncio.create_task(endless_a())
    await asyncio.sleep(0.05)
    asked = time.monotonic()

    async def b_request():
        async with sched.lease("b"):
            pass
    b = asyncio.create_task(b_request())
    await asyncio.sleep(0.1)
    done = []
    later_a = asyncio.create_task(request(sched, fx, "a", 0.0, done))     # held meanwhile
    await asyncio.sleep(0.05)
    assert not later_a.done()
    with pytest.raises(LoadRefused):
        await b
    # The bound, not the end of "a"'s lease, ended the wait: "a" is still leased.
    assert time.monotonic() - asked >= 0.3 and not first.done()
    await asyncio.wait_for(later_a, 10)         # released by the 507, served by "a"
    assert done and loads(fx) == ["a"]
    release.set()
    await first


async def test_zero_wait_keeps_the_immediate_507():
    """With swap_wait_ms = 0 the refusal comes without waiting once for a lease to end, and
    holds nothing."""
    sched, fx = two_models(swap_wait_ms=0)
    waits = []
    wait = sched.released.wait
    sched.released.wait = lambda timeout=None: (waits.append(timeout), wait(timeout))[1]
    async with sched.lease("a"):
        with pytest.raises(LoadRefused):
            async with sched.lease("b"):
                pass
        assert waits == [] and sched.residency.swap_gates == {}


async def swap_in_progress():
    """"b" being loaded in place of the idle "a": "a" already evicted (tier 2), held by the
    swap until b's load is done. Returns the scheduler, the effects, b's gate, b's request."""
    fx = Gated()
    gate = fx.close("load", "b")
    sched = make([(model("a"), 600), (model("b"), 600)], fx)
    async with sched.lease("a"):
        pass
    b = asyncio.create_task(request(sched, fx, "b", 0, []))
    await fx.began("load", "b")
    assert "a" in sched.residency.swap_gates and sched.models["a"].tier is Tier.RAM
    return sched, fx, gate, b


async def test_a_prefetch_of_a_model_the_swap_holds_is_ignored():
    """Regression: a prefetch skipped the gates, so one naming the model a swap had just
    evicted loaded it back over the new one as soon as that one's request ended."""
    sched, fx, gate, b = await swap_in_progress()
    sched.prefetch("a")
    gate.set()
    await b
    await asyncio.gather(*sched._background)
    assert loads(fx) == ["a", "b"] and sched.models["b"].tier is Tier.GPU


async def test_a_move_during_a_grouped_swap_waits_for_it_like_a_request():
    """Regression: a move skipped the gates and counted the held model at once."""
    sched, fx, gate, b = await swap_in_progress()
    moved = asyncio.create_task(sched.move("a", Tier.GPU))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not moved.done() and sched.models["a"].leases == 0    # at the gate, not admitted
    gate.set()
    await asyncio.gather(b, moved)
    assert loads(fx) == ["a", "b", "a"] and sched.models["a"].tier is Tier.GPU
    assert fx.violations == []
