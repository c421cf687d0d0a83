"""Ollama's keep_alive and the idle sweep (service/scheduling/keep_alive.py) on the scheduler
with a fake engine. Regressions of issue #35: keep_alive 0 on a busy model turned its answer
into a 429; a timer that met a refusal died without re-arming; one exception in a sweep ended
the sweep for good; a negative keep_alive was ignored; a non-finite deadline broke /api/ps."""
import asyncio
import math
import time

import pytest

from fakes import FakeEffects
from hypnos.planner.loading import NoRoom
from hypnos.planner.types import MIB, ModelShape, Priority, Tier
from hypnos.service.config.schema import Config
from hypnos.service.scheduling.keep_alive import KeepAlive
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.refusals import LoadRefused, NotServable
from hypnos.service.scheduling.scheduler import Scheduler
from test_scheduler import GPU, make, model

pytestmark = pytest.mark.anyio


async def until(condition, secs: float = 5.0) -> None:
    """Return once ``condition()`` holds; fail after ``secs``."""
    deadline = time.monotonic() + secs
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def demoted(sched: Scheduler, timers: KeepAlive, mid: str) -> None:
    """Return once ``mid`` is in tier 2 and its timer's task has ended (the task clears its
    deadline after the demotion it awaits returns, a moment after the tier changed)."""
    await until(lambda: sched.models[mid].tier is Tier.RAM and mid not in timers.tasks)


async def loaded(sched: Scheduler, *ids: str) -> None:
    for mid in ids:
        async with sched.lease(mid):
            pass


async def test_keep_alive_zero_on_a_busy_model_waits_for_its_lease():
    fx = FakeEffects()
    sched = make([(model("a", slots=2), 100)], fx)
    timers = KeepAlive(sched)
    async with sched.lease("a"):
        fx.serving.add("a")
        timers.after_request("a", 0)           # returns at once, raises nothing
        await asyncio.sleep(0.02)
        assert sched.models["a"].tier is Tier.GPU      # never under a running request
        fx.serving.discard("a")
    await demoted(sched, timers, "a")
    assert not fx.violations and not sched.models["a"].kept


async def test_a_timer_that_fires_during_a_request_demotes_after_it():
    fx = FakeEffects()
    sched = make([(model("a"), 100)], fx)
    timers = KeepAlive(sched)
    await loaded(sched, "a")
    timers.after_request("a", 0.01)
    async with sched.lease("a"):
        fx.serving.add("a")
        await asyncio.sleep(0.05)               # the timer fired meanwhile
        assert sched.models["a"].tier is Tier.GPU and "a" in timers.tasks
        fx.serving.discard("a")
    await demoted(sched, timers, "a")
    assert not fx.violations


class RefusesMoves(Scheduler):
    """A scheduler whose first ``refusals`` moves are refused (a model that cannot be moved
    for a while)."""
    refusals = 2

    async def move(self, model_id, target, *args, **kw):
        self.moves = getattr(self, "moves", 0) + 1
        if self.moves <= self.refusals:
            raise NotServable("not now")
        return await super().move(model_id, target, *args, **kw)


async def test_a_timer_refused_tries_again_until_the_model_moves():
    cfg = model("a")
    sched = RefusesMoves(Config(models=[cfg]), GPU, FakeEffects(), rss=lambda: 0)
    sched.add(ModelState(cfg=cfg, paths={}, shape=ModelShape(weights_bytes=100 * MIB)))
    timers = KeepAlive(sched, retry_secs=0.01)
    await loaded(sched, "a")
    timers.after_request("a", 0.01)
    await demoted(sched, timers, "a")
    assert sched.moves == 3 and "a" not in timers.deadlines


async def test_the_sweep_survives_an_exception_and_keeps_running():
    cfg = model("a")
    cfg.idle_demote_secs = 0.01
    sched = make([(cfg, 100)])
    sweeps = []
    real_move = sched.move

    async def move(model_id, target, *args, **kw):
        sweeps.append(target)
        if len(sweeps) == 1:
            raise RuntimeError("a race")
        return await real_move(model_id, target, *args, **kw)
    sched.move = move
    timers = KeepAlive(sched)
    await loaded(sched, "a")
    timers.start(every=0.01)
    try:
        await until(lambda: sched.models["a"].tier is Tier.RAM)
        assert sweeps == [Tier.RAM, Tier.RAM] and not timers.sweeper.done()
    finally:
        timers.close()


async def test_the_sweep_loop_outlives_a_sweep_that_raises():
    timers = KeepAlive(make([(model("a"), 100)]))
    calls = []

    async def sweep():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a model removed mid-sweep")
    timers.sweep = sweep
    timers.start(every=0.01)
    try:
        await until(lambda: len(calls) >= 3)
        assert not timers.sweeper.done()
    finally:
        timers.close()


async def test_a_negative_keep_alive_pins_and_cancels_the_timer():
    fx = FakeEffects()
    sched = make([(model("a"), 600), (model("b"), 600)], fx)
    timers = KeepAlive(sched)
    await loaded(sched, "a")
    timers.after_request("a", 0.02)
    timers.after_request("a", -1)
    assert sched.models["a"].priority is Priority.REALTIME_PINNED
    with pytest.raises(LoadRefused) as exc:        # b would need a's room: a stays
        await loaded(sched, "b")
    assert isinstance(exc.value.refusal, NoRoom)
    await asyncio.sleep(0.05)                        # past the cancelled timer
    assert sched.models["a"].tier is Tier.GPU and not timers.tasks
    assert timers.expires_at("a") > "2300"           # Ollama's "forever": now + 292 years
    timers.after_request("a", 0)                    # a later keep_alive lets it go
    await until(lambda: sched.models["a"].tier is Tier.RAM)
    assert sched.models["a"].priority is Priority.NORMAL
    await loaded(sched, "b")
    assert ("unload", "a") in fx.log


async def test_a_duration_pins_until_it_runs_out_then_demotes():
    sched = make([(model("a"), 600), (model("b"), 600)])
    timers = KeepAlive(sched)
    await loaded(sched, "a")
    timers.after_request("a", 0.1)
    assert timers.expires_at("a") is not None
    with pytest.raises(LoadRefused):
        await loaded(sched, "b")
    await demoted(sched, timers, "a")
    assert not sched.models["a"].kept and timers.expires_at("a") is None
    await loaded(sched, "b")


async def test_timers_are_keyed_by_the_resolved_id_and_the_sweep_leaves_them_alone():
    cfg = model("a")
    cfg.aliases = ["nick"]
    cfg.idle_demote_secs = 0.01
    sched = make([(cfg, 100)])
    timers = KeepAlive(sched)
    await loaded(sched, "nick")
    timers.after_request("nick", 60)
    assert set(timers.deadlines) == {"a"} and set(timers.tasks) == {"a"}
    await asyncio.sleep(0.03)
    await timers.sweep()                           # past idle_demote_secs, but kept
    assert sched.models["a"].tier is Tier.GPU
    timers.after_request("nick", 0)               # replaces the 60 s timer
    await timers.settled("nick")
    assert sched.models["a"].tier is Tier.RAM and not timers.tasks


def test_expires_at_never_raises():
    timers = KeepAlive(make([(model("a"), 100)]))
    for at in (math.nan, 1e308, -1e308, math.inf):
        timers.deadlines["a"] = at
        timers.expires_at("a")
    timers.deadlines["a"] = 0.0
    assert timers.expires_at("a") == "1970-01-01T00:00:00Z"
