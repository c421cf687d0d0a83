"""The scheduler driven by a fake engine: leases, queueing, eviction order, 507s, moves.

The fake records every effect and proves "a model was never unloaded while it was serving".
"""
import asyncio

import pytest

from fakes import FakeEffects, Gated
from hypnos.planner.loading import NoRoom, OverProcessCap, TooBig
from hypnos.planner.types import (MIB, Accelerator, Hardware, ModelShape, Priority, Tier,
                                  Topology)
from hypnos.service import errors
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.refusals import (Busy, DisabledModel, LoadRefused, NotLoaded,
                                     OverDeadline, UnknownModel)
from hypnos.service.scheduling.scheduler import Scheduler

pytestmark = pytest.mark.anyio


# A discrete GPU whose tier 1 budget (VRAM - 512 MiB) is 1000 MiB.
GPU = Hardware(Accelerator.NVIDIA, Topology.DISCRETE, (512 + 1000) * MIB, 64 * 1024 * MIB,
               "fake", simulated=True)


def make(models, effects=None, max_queue=8, hw=GPU, rss=lambda: 0):
    """A scheduler on ``hw`` with ``models`` as (config, MiB or a ModelShape); ``rss``: the
    process memory the max_process_memory_bytes check reads."""
    cfg = Config(models=[m for m, _ in models])
    cfg.limits.max_queue_per_model = max_queue
    sched = Scheduler(cfg, hw, effects or FakeEffects(), rss=rss)
    for m, size in models:
        shape = size if isinstance(size, ModelShape) else ModelShape(weights_bytes=size * MIB)
        sched.add(ModelState(cfg=m, paths={}, shape=shape))
    return sched


def model(mid, priority=Priority.NORMAL, slots=1, warm=True):
    return ModelConfig(id=mid, modality="text_generation", engine="ggml_llama",
                       weights_path=f"{mid}.gguf", priority=priority, slots=slots,
                       keep_warm_in_ram=warm)


async def test_concurrent_first_requests_load_once():
    fx = FakeEffects(load_delay=0.05)
    sched = make([(model("a", slots=4), 100)], fx)

    async def one():
        async with sched.lease("a") as lease:
            return lease.previous_tier
    tiers = await asyncio.gather(*[one() for _ in range(4)])
    assert fx.log.count(("load", "a")) == 1
    assert Tier.SSD in tiers and sched.models["a"].tier is Tier.GPU


async def test_two_models_that_fit_one_evict_each_other():
    fx = FakeEffects()
    sched = make([(model("a"), 600), (model("b"), 600)], fx)
    async with sched.lease("a") as lease:
        assert lease.previous_tier is Tier.SSD and lease.evicted == []
    async with sched.lease("b") as lease:
        assert lease.evicted == ["a"]
        assert lease.previous_tier is Tier.SSD
    assert sched.models["a"].tier is Tier.RAM      # keep_warm_in_ram
    assert sched.recent_evictions[-1]["model"] == "a"
    assert sched.recent_evictions[-1]["for_model"] == "b"
    assert sched.recent_evictions[-1]["reason"] == "memory_budget"
    async with sched.lease("a") as lease:
        assert lease.previous_tier is Tier.RAM and lease.evicted == ["b"]
    assert not fx.violations


async def test_leased_model_is_never_evicted_507_instead():
    fx = FakeEffects()
    sched = make([(model("a"), 600), (model("b"), 600)], fx)
    async with sched.lease("a"):
        fx.serving.add("a")
        with pytest.raises(LoadRefused) as exc:
            async with sched.lease("b"):
                pass
        assert isinstance(exc.value.refusal, NoRoom)
        assert errors.from_refusal(exc.value).status == 507
        fx.serving.discard("a")
    assert ("unload", "a") not in fx.log
    assert sched.models["b"].leases == 0 and sched.models["a"].leases == 0


async def test_model_too_big_for_the_machine_is_507():
    sched = make([(model("huge"), 5000)])
    with pytest.raises(LoadRefused, match="does not fit this machine") as exc:
        async with sched.lease("huge"):
            pass
    assert isinstance(exc.value.refusal, TooBig)
    assert isinstance(errors.from_refusal(exc.value), errors.InsufficientMemory)


async def test_eviction_prefers_low_priority():
    fx = FakeEffects()
    sched = make([(model("low", Priority.LOW), 400), (model("high", Priority.HIGH), 400),
                  (model("new"), 400)], fx)
    async with sched.lease("high"):
        pass
    async with sched.lease("low"):
        pass
    async with sched.lease("new") as lease:
        assert lease.evicted == ["low"]


async def test_realtime_pinned_is_never_evicted():
    sched = make([(model("rt", Priority.REALTIME_PINNED), 600), (model("b"), 600)])
    async with sched.lease("rt"):
        pass
    with pytest.raises(LoadRefused) as exc:
        async with sched.lease("b"):
            pass
    assert isinstance(exc.value.refusal, NoRoom)


async def test_queue_beyond_max_is_model_busy():
    fx = FakeEffects()
    sched = make([(model("a", slots=1), 100)], fx, max_queue=1)
    gate = asyncio.Event()

    async def hold():
        async with sched.lease("a"):
            await gate.wait()
    first = asyncio.create_task(hold())
    second = asyncio.create_task(hold())      # queued behind the one slot
    await asyncio.sleep(0.05)
    with pytest.raises(Busy):
        async with sched.lease("a"):
            pass
    gate.set()
    await asyncio.gather(first, second)
    assert sched.models["a"].leases == 0


async def test_slots_bound_concurrency():
    sched = make([(model("a", slots=2), 100)])
    active, peak = 0, 0

    async def one():
        nonlocal active, peak
        async with sched.lease("a"):
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.02)
            active -= 1
    await asyncio.gather(*[one() for _ in range(6)])
    assert peak == 2


async def test_demotion_without_keep_warm_goes_to_disk():
    fx = FakeEffects()
    sched = make([(model("a", warm=False), 600), (model("b"), 600)], fx)
    async with sched.lease("a"):
        pass
    async with sched.lease("b"):
        pass
    assert sched.models["a"].tier is Tier.SSD
    assert ("drop", "a") in fx.log and ("pin", "a") not in fx.log


async def test_move_refused_while_leased_and_moves_when_idle():
    fx = FakeEffects()
    sched = make([(model("a"), 100)], fx)
    async with sched.lease("a"):
        with pytest.raises(Busy):
            await sched.move("a", Tier.SSD)
    await sched.move("a", Tier.RAM)
    assert sched.models["a"].tier is Tier.RAM and sched.models["a"].pinned is not None
    await sched.move("a", Tier.SSD)
    assert sched.models["a"].tier is Tier.SSD and sched.models["a"].pinned is None
    await sched.move("a", Tier.GPU)
    assert sched.models["a"].tier is Tier.GPU


async def test_unknown_and_disabled_models():
    sched = make([(model("a"), 100)])
    with pytest.raises(UnknownModel):
        async with sched.lease("nope"):
            pass
    sched.models["a"].enabled = False
    with pytest.raises(DisabledModel):
        async with sched.lease("a"):
            pass


async def test_deadline_unmeetable_when_the_estimate_is_longer():
    sched = make([(model("a"), 3000 * 0 + 900)])
    st = sched.models["a"]
    st.stats.load_ms[Tier.SSD] = 5000.0
    st.cfg.keep_warm_in_ram = False
    with pytest.raises(OverDeadline) as exc:
        async with sched.lease("a", deadline_ms=100):
            pass
    assert "Retry-After" in errors.from_refusal(exc.value).headers
    async with sched.lease("a", deadline_ms=60000):
        pass


async def test_requests_per_minute_and_service_time_are_measured():
    sched = make([(model("a"), 100)])
    for _ in range(3):
        async with sched.lease("a"):
            await asyncio.sleep(0.01)
    st = sched.models["a"]
    assert st.stats.served == 3
    assert st.stats.requests_per_minute() > 0
    assert st.stats.service_ms >= 5


class _Parked:
    def __init__(self, nbytes, tokens=100, slots=1):
        self.bytes, self.tokens, self.slots = nbytes, tokens, slots


async def test_kv_parking_round_trip_through_an_eviction():
    fx = FakeEffects()
    fx.park = lambda st, engine: (fx.log.append(("park", st.id)), _Parked(10 * MIB))[1]
    fx.restore = lambda st, engine, parked: (fx.log.append(("restore", st.id)),
                                             (parked.tokens, 1.5))[1]
    sched = make([(model("a"), 600), (model("b"), 600)], fx)
    sched.kv_park.configure(True, 64 * MIB)
    async with sched.lease("a"):
        pass
    async with sched.lease("b"):
        pass
    assert ("park", "a") in fx.log and sched.kv_park.snapshot()["used_bytes"] == 10 * MIB
    async with sched.lease("a") as lease:
        assert lease.phases.kv_restored_tokens == 100 and lease.phases.kv_restore_ms == 1.5
    assert ("restore", "a") in fx.log
    snap = sched.kv_park.snapshot()
    assert [m["model"] for m in snap["models"]] == ["b"]        # a taken, b parked


def test_kv_park_store_cap_drops_the_oldest_and_off_drops_all():
    from hypnos.service.scheduling.kv_park import KvParkStore
    store = KvParkStore(True, 25)
    assert store.put("a", _Parked(10)) and store.put("b", _Parked(10))
    assert store.put("c", _Parked(10))                 # 30 > 25: a (oldest) goes
    assert [m["model"] for m in store.snapshot()["models"]] == ["b", "c"]
    assert not store.put("huge", _Parked(26))
    store.configure(None, 10)
    assert [m["model"] for m in store.snapshot()["models"]] == ["c"]
    store.configure(False, None)
    assert store.snapshot()["used_bytes"] == 0 and not store.put("d", _Parked(1))


async def test_a_request_cancelled_during_a_cold_load_leaves_the_model_booked():
    """Regression: a client hanging up mid-load left an engine built with the model still
    in tier 3, unbooked, and the next request loaded it a second time."""
    fx = Gated()
    gate = fx.close("load", "a")
    sched = make([(model("a"), 100)], fx)

    async def one():
        async with sched.lease("a"):
            pass
    task = asyncio.create_task(one())
    await fx.began("load", "a")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()
    async with sched.residency.place_lock:     # the shielded load ends (booked) under it
        pass
    st = sched.models["a"]
    assert st.tier is Tier.GPU and st.placement is not None and st.leases == 0
    async with sched.lease("a") as lease:
        assert lease.previous_tier is Tier.GPU
    assert fx.log.count(("load", "a")) == 1


async def test_victim_leased_during_an_earlier_eviction_is_not_unloaded():
    """A victim that a request (or a hold) asks for while the first victim is being unloaded
    is never unloaded under it: the hold waits for the swap, then the request loads it
    again. "c" needs both "a" (low priority: evicted first) and "b" evicted."""
    fx = Gated()
    sched = make([(model("a", Priority.LOW), 400), (model("b"), 400), (model("c"), 800)], fx)
    for mid in ("a", "b"):
        async with sched.lease(mid):
            pass
    gate = fx.close("unload", "a")
    big = asyncio.create_task(_lease_once(sched, "c"))
    await fx.began("unload", "a")

    async def count_a_prompt():       # a hold: no unload under it
        async with sched.hold("b"):
            fx.log.append(("hold", "b"))
            assert sched.models["b"].tier is not Tier.GPU
    hold = asyncio.create_task(count_a_prompt())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not hold.done() and ("unload", "b") not in fx.log     # it waits for the swap
    gate.set()
    await asyncio.gather(big, hold)
    async with sched.lease("b"):
        fx.serving.add("b")
        await asyncio.sleep(0)
        fx.serving.discard("b")
    assert fx.log.index(("unload", "b")) < fx.log.index(("hold", "b"))
    assert fx.violations == []
    assert [m for op, m in fx.log if op == "load"] == ["a", "b", "c", "b"]
    assert sched.models["b"].tier is Tier.GPU


async def _lease_once(sched, mid):
    async with sched.lease(mid):
        pass


async def test_a_hold_does_not_take_a_queue_place():
    """Regression: counting a prompt holds the model, and holds were counted as leases, so a
    burst of arrivals saw a full queue before max_queue_per_model requests were queued."""
    sched = make([(model("a", slots=1), 100)], max_queue=1)
    async with sched.hold("a"):
        async with sched.lease("a"):
            second = asyncio.create_task(_lease_once(sched, "a"))
            await asyncio.sleep(0.01)
            assert sched.models["a"].leases == 2       # one running, one queued
            with pytest.raises(Busy):
                await _lease_once(sched, "a")
        await second
    st = sched.models["a"]
    assert st.leases == 0 and st.holds == 0


async def test_process_memory_cap_is_the_507_process_memory_cap():
    """Loading "a" (100 MiB booked) with the process at 950 MiB and a 1000 MiB cap would
    reach 1050 MiB: refused with the error the HTTP layer answers 507 process_memory_cap,
    nothing loaded. At 900 MiB it reaches the cap exactly and loads."""
    fx = FakeEffects()
    rss = [950 * MIB]
    sched = make([(model("a"), 100)], fx, rss=lambda: rss[0])
    sched.config.hardware.max_process_memory_bytes = 1000 * MIB
    with pytest.raises(LoadRefused) as exc:
        async with sched.lease("a"):
            pass
    assert isinstance(exc.value.refusal, OverProcessCap)
    http = errors.from_refusal(exc.value)
    assert (http.status, http.type) == (507, "process_memory_cap")
    assert "1.03 GiB" in exc.value.message and "(0.98 GiB)" in exc.value.message
    assert fx.log == [] and sched.models["a"].leases == 0
    assert sched.models["a"].tier is Tier.SSD
    rss[0] = 900 * MIB
    async with sched.lease("a"):
        pass
    assert sched.models["a"].tier is Tier.GPU


async def test_process_memory_cap_counts_the_evicted_model():
    """"a" (600) loads at 300 MiB (-> 900). Then "b" (600) evicts "a": at 950 MiB the
    process stays at 950 - 600 + 600, under the 1000 MiB cap."""
    rss = [300 * MIB]
    sched = make([(model("a"), 600), (model("b"), 600)], rss=lambda: rss[0])
    sched.config.hardware.max_process_memory_bytes = 1000 * MIB
    async with sched.lease("a"):
        pass
    rss[0] = 950 * MIB
    async with sched.lease("b") as lease:
        assert lease.evicted == ["a"]


def layered(non_layer_mib=100, layers=10, layer_mib=90):
    """Weights only (no KV, no workspace): a placement books 100 + 90 x gpu_layers MiB."""
    return ModelShape(weights_bytes=(non_layer_mib + layers * layer_mib) * MIB,
                      num_layers=layers, layer_bytes=layer_mib * MIB,
                      non_layer_bytes=non_layer_mib * MIB)


async def test_partial_placement_beside_a_leased_model():
    """Tier 1 is 1000 MiB; "a" (400) is leased and "b" (200) idle. "big" (1000 whole) is
    placed in the 600 that evicting "b" frees: (600 - 100) // 90 = 5 of its 10 layers."""
    fx = FakeEffects()
    sched = make([(model("a"), 400), (model("b"), 200), (model("big"), layered())], fx)
    async with sched.lease("b"):
        pass
    async with sched.lease("a"):
        fx.serving.add("a")
        async with sched.lease("big") as lease:
            p = lease.model.placement
            assert (p.gpu_layers, p.pinned_ram_layers) == (5, 5)
            assert p.booked_tier1_bytes == 550 * MIB and p.device == "cuda"
            assert lease.evicted == ["b"]
        fx.serving.discard("a")
    assert not fx.violations
    assert sched.tier1_booked() == (400 + 550) * MIB


# ------------------------------------------------------------------ fit: count once, lease once

def layered_chat(mid: str, context_len: int = 4096):
    """A layered model (its context is rebuilt for a larger need), 2 KiB of KV a token."""
    m = ModelConfig(id=mid, modality="text_generation", engine="ggml_llama",
                    weights_path=f"{mid}.gguf", context_len=context_len)
    shape = ModelShape(weights_bytes=100 * MIB, num_layers=10, layer_bytes=9 * MIB,
                       non_layer_bytes=10 * MIB, kv_bytes_per_token=2048,
                       max_context_len=32768)
    return m, shape


async def test_fit_counts_once_on_the_loaded_engine_and_rebuilds_under_the_same_lease():
    fx = FakeEffects()
    sched = make([layered_chat("a")], fx)
    seen = []

    async def fit(engine):
        seen.append(engine)
        return 16384                     # the counted prompt needs more than the 4096 loaded

    async with sched.lease("a", context_len=2048, fit=fit) as lease:
        st = lease.model
        assert st.placement.allocated_context_len == 16384
    assert len(seen) == 1 and seen[0] is not None       # counted once, on a loaded engine
    assert fx.log.count(("load", "a")) == 2              # cold load, then the one rebuild
    assert st.leases == 0 and st.running == 0


async def test_fit_does_not_rebuild_a_resident_model_for_the_estimate():
    fx = FakeEffects()
    sched = make([layered_chat("a")], fx)
    async with sched.lease("a"):
        pass
    calls = []

    async def fit(engine):
        calls.append(1)
        return None                      # what is loaded holds the prompt

    # The estimate (chars / 4 + max_tokens) is above the loaded 4096; the count says no.
    async with sched.lease("a", context_len=12000, fit=fit) as lease:
        assert lease.model.placement.allocated_context_len == 4096
    assert calls == [1] and fx.log.count(("load", "a")) == 1


async def test_what_fit_raises_ends_the_lease():
    sched = make([layered_chat("a")])

    async def fit(engine):
        raise errors.ContextOverBudget(40000, 32768)

    with pytest.raises(errors.ContextOverBudget):
        async with sched.lease("a", fit=fit):
            pass
    st = sched.models["a"]
    assert st.leases == 0 and st.running == 0 and st.holds == 0
    async with sched.lease("a"):                          # nothing left held
        pass


async def test_hold_engine_reads_the_engine_after_its_wait():
    """The sessions export race: "b" is loaded when the hold is asked for, but a swap that
    unloads it is under way; the hold waits for it, then refuses NotLoaded instead of
    yielding an engine that is gone. A loaded model's hold yields its engine."""
    fx = Gated()
    sched = make([(model("a", Priority.LOW), 400), (model("b"), 400), (model("c"), 800)], fx)
    for mid in ("a", "b"):
        async with sched.lease(mid):
            pass
    async with sched.hold_engine("b") as engine:
        assert engine is sched.models["b"].engine is not None
    gate = fx.close("unload", "a")
    big = asyncio.create_task(_lease_once(sched, "c"))
    await fx.began("unload", "a")
    assert sched.models["b"].engine is not None          # what the old check read

    async def export_b():
        async with sched.hold_engine("b"):
            raise AssertionError("held an engine a swap unloaded")
    held = asyncio.create_task(export_b())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not held.done()                               # it waits for the swap
    gate.set()
    await big
    with pytest.raises(NotLoaded):
        await held
    assert sched.models["b"].engine is None and sched.models["b"].leases == 0
    assert fx.violations == []
