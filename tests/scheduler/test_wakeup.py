"""The release Wakeup: notify wakes every current waiter, a timeout returns False, a waiter
arriving after a notify waits for the next one."""
import asyncio

import pytest

from hypnos.service.scheduling.wakeup import Wakeup

pytestmark = pytest.mark.anyio


async def test_notify_wakes_every_waiter():
    w = Wakeup()
    waiters = [asyncio.create_task(w.wait(5)) for _ in range(3)]
    await asyncio.sleep(0)
    w.notify()
    assert await asyncio.gather(*waiters) == [True, True, True]


async def test_timeout_and_later_waiters():
    w = Wakeup()
    w.notify()                                  # nobody waiting: nothing is remembered
    assert await w.wait(0.01) is False
    assert await w.wait(0) is False


async def test_a_drain_ends_when_the_lease_ends_not_at_its_bound():
    from test_scheduler import make, model
    sched = make([(model("a"), 100)])
    release = asyncio.Event()

    async def one():
        async with sched.lease("a"):
            await release.wait()
    task = asyncio.create_task(one())
    await asyncio.sleep(0.01)
    from hypnos.service.scheduling.pool import ModelState
    old = sched.models["a"]
    new = ModelState(cfg=old.cfg, paths={}, shape=old.shape)
    swap = asyncio.create_task(sched.pool.swap("a", new, drain_secs=30))
    await asyncio.sleep(0.01)
    assert not swap.done()
    started = asyncio.get_running_loop().time()
    release.set()
    await asyncio.wait_for(swap, 5)
    assert asyncio.get_running_loop().time() - started < 1      # woken, not timed out
    assert sched.models["a"] is new
    await task
