"""Grouped swaps (anti-thrash), with a fake engine: two models that fit tier 1 only one at a
time, under load. A request for the other model holds the resident model's new requests and
waits (at most limits.swap_wait_ms) for its admitted ones; the waiting requests then go as a
group. Loads are counted to show there is no thrash, and times to show the bound holds."""
import asyncio
import time

import pytest

from hypnos.service.scheduling.refusals import LoadRefused
from fakes import FakeEffects
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


async def request(sched, fx, mid, secs, done: list):
    async with sched.lease(mid):
        fx.serving.add(mid)
        await asyncio.sleep(secs)
        fx.serving.discard(mid)
    done.append((mid, time.monotonic()))


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
    its turn well within swap_wait_ms, and the "a" requests that arrived meanwhile are
    served after it as one group."""
    sched, fx = two_models(swap_wait_ms=3000, a_slots=4)     # "a" runs requests side by side
    done, stop = [], asyncio.Event()
    tasks = []

    async def keep_a_busy():
        while not stop.is_set():
            tasks.append(asyncio.create_task(request(sched, fx, "a", 0.05, done)))
            await asyncio.sleep(0.02)
    feeder = asyncio.create_task(keep_a_busy())
    await asyncio.sleep(0.2)
    asked = time.monotonic()
    await request(sched, fx, "b", 0.01, done)
    waited = time.monotonic() - asked
    stop.set()
    await feeder
    await asyncio.gather(*tasks)
    assert waited < 1.0                     # the running "a" requests took 50 ms each
    assert loads(fx) == ["a", "b", "a"]     # one swap there, one back: no thrash
    b_done = next(t for mid, t in done if mid == "b")
    after_b = [t for mid, t in done if mid == "a" and t > b_done]
    assert after_b                          # the held "a" requests were served afterwards
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
    assert 0.3 <= time.monotonic() - asked < 1.0
    await asyncio.wait_for(later_a, 1)          # released by the 507, served by "a"
    assert done and loads(fx) == ["a"]
    release.set()
    await first


async def test_zero_wait_keeps_the_immediate_507():
    sched, fx = two_models(swap_wait_ms=0)
    async with sched.lease("a"):
        started = time.monotonic()
        with pytest.raises(LoadRefused):
            async with sched.lease("b"):
                pass
        assert time.monotonic() - started < 0.2
