"""Residency where a resident model has to go while requests may be on it, with a fake engine:
a context rebuild whose load fails, and a model whose engine lost an RPC worker (`drop_lost`)
while other requests still run on its slots."""
import asyncio

import pytest

from fakes import FakeEffects, IdleEngine
from hypnos.engines.errors import EngineError
from hypnos.planner.types import Tier
from hypnos.service.refusals import LoadFailed
from test_scheduler import layered_chat, make, model

pytestmark = pytest.mark.anyio


class FailingLoads(FakeEffects):
    """Loads fail while ``failing`` is set (an engine that refuses its weights)."""

    def __init__(self):
        super().__init__()
        self.failing = False
        self.failures: list[str] = []

    def load(self, st, placement, kept):
        if self.failing:
            raise EngineError("the weights were refused")
        return super().load(st, placement, kept)

    def count_load_failure(self, st) -> None:
        self.failures.append(st.id)


def free_slots(st) -> int:
    return st.slots._value


async def test_a_failed_context_rebuild_leaves_the_model_out_of_tier_1_and_its_slots_free():
    """A request needing more context than the resident model's slot unloads it to rebuild
    it; when that load fails the request gets the failure, the model books nothing in tier 1,
    every slot is free again, and the next request loads it."""
    fx = FailingLoads()
    sched = make([layered_chat("a")], fx)
    async with sched.lease("a"):
        pass
    st = sched.models["a"]
    assert st.placement.allocated_context_len == 4096
    fx.failing = True
    with pytest.raises(LoadFailed, match="weights were refused"):
        async with sched.lease("a", context_len=16384):
            pass
    assert fx.failures == ["a"] and ("unload", "a") in fx.log
    demoted = st.tier
    assert demoted is not Tier.GPU and st.placement is None and st.engine is None
    assert sched.tier1_booked() == 0
    assert free_slots(st) == st.cfg.slots and st.leases == st.running == 0
    fx.failing = False
    async with sched.lease("a", context_len=16384) as lease:
        assert lease.previous_tier is demoted
        assert st.placement.allocated_context_len == 16384
    assert [op for op, _ in fx.log].count("load") == 2        # the first and the last


class CarriesKV(FakeEffects):
    """Parks a token standing for the engine's KV and records what is restored."""

    def __init__(self):
        super().__init__()
        self.restored: list[object] = []

    def park(self, st, engine):
        self.log.append(("park", st.id))
        return f"kv of {st.id}"

    def restore(self, st, engine, parked) -> tuple[int, float]:
        self.log.append(("restore", st.id))
        self.restored.append(parked)
        return 7, 1.0


async def test_a_context_rebuild_carries_the_slots_kv_even_with_parking_off():
    """Issue #36: a rebuild for a larger context dropped every slot's KV (the turn-2 miss).
    It now parks the engine's KV before the unload and restores it into the rebuilt engine,
    whatever hardware.kv_park says; the KV park store keeps nothing of it."""
    fx = CarriesKV()
    sched = make([layered_chat("a")], fx)
    sched.kv_park.configure(False, None)
    async with sched.lease("a"):
        pass
    async with sched.lease("a", context_len=16384) as lease:
        assert sched.models["a"].placement.allocated_context_len == 16384
        assert lease.phases is not None and lease.phases.kv_restored_tokens == 7
    ops = [op for op, _ in fx.log if op in ("park", "unload", "load", "restore")]
    assert ops == ["load", "park", "unload", "load", "restore"]
    assert fx.restored == ["kv of a"] and sched.kv_park.snapshot()["models"] == []


class LostEngine(IdleEngine):
    """A split engine (`SplitsLayers`): ``lost`` says why it is gone ("" while it serves)."""
    lost = ""
    split_layers: dict[str, int] = {}

    def child_rss(self) -> int:
        return 0


async def until(condition, bound_s: float = 10.0) -> None:
    """Let the event loop run until ``condition()`` (a cap on the wait, not a timing claim)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not condition():
        assert loop.time() < deadline, "the condition never came true"
        await asyncio.sleep(0.005)


async def test_a_lost_engine_is_demoted_once_the_requests_on_its_slots_end():
    """Regression: `drop_lost` unloaded the model at once, under the requests still running
    on its other slots. Two requests run when the RPC worker goes; the first ends (on a real
    split engine: with WorkerLost) and starts `drop_lost`, which now takes every slot first:
    the model is demoted only once the second has ended, and the eviction names the worker."""
    engine = LostEngine()
    fx = FakeEffects(engine=engine)
    sched = make([(model("a", slots=2), 100)], fx)
    st = sched.models["a"]
    running = [asyncio.Event(), asyncio.Event()]
    release = [asyncio.Event(), asyncio.Event()]
    on_slots = set()

    async def on_a_slot(i: int):
        async with sched.lease("a"):
            on_slots.add(i)
            fx.serving.add("a")          # an unload now would be one under a request
            running[i].set()
            await release[i].wait()
            on_slots.discard(i)
            if not on_slots:
                fx.serving.discard("a")
    requests = [asyncio.create_task(on_a_slot(i)) for i in (0, 1)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in running)), 10)
    engine.lost = "RPC worker 10.0.0.2:50052 stopped answering"
    release[0].set()
    await asyncio.wait_for(requests[0], 10)          # its lease ended: drop_lost starts
    # drop_lost holds the slot that request freed and waits for the other (before the fix
    # it unloaded the model at once).
    await until(lambda: free_slots(st) == 0 or ("unload", "a") in fx.log)
    assert ("unload", "a") not in fx.log and st.tier is Tier.GPU
    release[1].set()
    await asyncio.wait_for(asyncio.gather(requests[1], *sched._background), 10)
    assert fx.violations == [] and ("unload", "a") in fx.log
    assert st.tier is Tier.RAM and st.engine is None and free_slots(st) == 2
    last = sched.recent_evictions[-1]
    assert (last["model"], last["reason"]) == ("a", "rpc_worker_lost")
    assert "10.0.0.2:50052" in last["detail"]


async def test_a_lease_is_reported_on_admission_so_a_failed_load_still_names_its_model():
    """``on_admit`` (how a request's record learns its leases) sees the lease before the
    load: a request whose load fails is still logged with its model and previous tier."""
    fx = FailingLoads()
    fx.failing = True
    sched = make([layered_chat("a")], fx)
    seen = []
    with pytest.raises(LoadFailed):
        async with sched.lease("a", on_admit=seen.append):
            pass
    assert [lease.model.id for lease in seen] == ["a"]
    assert seen[0].previous_tier is Tier.SSD


async def test_the_window_told_is_the_context_this_machine_can_fund():
    """context_window (what /v1/models, Codex's catalog, Anthropic's list and /api/show tell)
    is the trained context narrowed to what the model alone can be placed with: 64 KiB of KV
    a token cannot hold 32768 tokens in a 1000 MiB tier 1. A request for that window loads;
    one 256 tokens above it is refused as too big for the machine."""
    from hypnos.planner.loading import TooBig
    from hypnos.planner.types import MIB, ModelShape
    from hypnos.service.config.schema import ModelConfig
    from hypnos.service.refusals import LoadRefused
    cfg = ModelConfig(id="wide", modality="text_generation", engine="ggml_llama",
                      weights_path="wide.gguf")
    shape = ModelShape(weights_bytes=100 * MIB, num_layers=10, layer_bytes=9 * MIB,
                       non_layer_bytes=10 * MIB, kv_bytes_per_token=64 * 1024,
                       max_context_len=32768)
    sched = make([(cfg, shape)], FakeEffects())
    st = sched.models["wide"]
    window = sched.context_window(st)
    assert 4096 < window < 32768 and window % 256 == 0
    async with sched.lease("wide", context_len=window):
        assert st.placement.allocated_context_len == window
    with pytest.raises(LoadRefused) as refused:
        async with sched.lease("wide", context_len=window + 256):
            pass
    assert isinstance(refused.value.refusal, TooBig)
    # A model with little KV a token keeps its trained window (it fits).
    small, small_shape = layered_chat("small")
    sched = make([(small, small_shape)], FakeEffects())
    assert sched.context_window(sched.models["small"]) == 32768
