"""Tier 2 of a chat model on a host computing from host memory is its engine kept without a
context (``Effects.suspend``); beside a discrete GPU it stays the pinned files. On FakeEffects:
what each tier holds, what is booked, and the fall-backs."""
import pytest

from fakes import FakeEffects
from hypnos.planner.types import MIB, Accelerator, Hardware, ModelShape, Tier, Topology
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.service.scheduling.pool import KeptEngine, ModelState
from hypnos.service.scheduling.scheduler import Scheduler

pytestmark = pytest.mark.anyio

# CPU only: tier 1 = RAM / 2 = 1000 MiB, tier 2 = RAM / 4 = 500 MiB.
CPU = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 2000 * MIB, "fake", simulated=True)
UNIFIED = Hardware(Accelerator.METAL, Topology.UNIFIED, 0, 64 * 1024 * MIB, simulated=True)
GPU = Hardware(Accelerator.NVIDIA, Topology.DISCRETE, (512 + 1000) * MIB, 64 * 1024 * MIB,
               "fake", simulated=True)


def make(sizes: dict[str, int], hw=CPU, modality="text_generation", fx=None, context=400):
    """Models of ``sizes`` MiB of weights, each with ``context`` MiB of workspace (what a
    promotion from a kept engine builds)."""
    models = [ModelConfig(id=mid, modality=modality, engine="ggml_llama",
                          weights_path=f"{mid}.gguf") for mid in sizes]
    sched = Scheduler(Config(models=models), hw, fx or FakeEffects())
    for m in models:
        shape = ModelShape(weights_bytes=sizes[m.id] * MIB, workspace_bytes=context * MIB)
        sched.add(ModelState(cfg=m, paths={}, shape=shape))
    return sched


async def use(sched, mid):
    async with sched.lease(mid) as lease:
        return lease


@pytest.mark.parametrize("hw", [CPU, UNIFIED])
async def test_a_demoted_chat_model_keeps_its_engine_and_is_promoted_without_a_reload(hw):
    fx = FakeEffects()
    # CPU: 300 + 400 MiB each, one fits tier 1 (1000 MiB), one's weights tier 2 (500 MiB).
    # Unified 64 GiB: tier 1 48 GiB, tier 2 12 GiB: 10,000 + 30,000 MiB each.
    sizes, context = ({"a": 300, "b": 300}, 400) if hw is CPU else \
        ({"a": 10_000, "b": 10_000}, 30_000)
    sched = make(sizes, hw, fx=fx, context=context)
    await use(sched, "a")
    engine = sched.models["a"].engine
    await use(sched, "b")
    a = sched.models["a"]
    assert a.tier is Tier.RAM and a.engine is None
    assert isinstance(a.pinned, KeptEngine) and a.pinned.engine is engine
    assert ("suspend", "a") in fx.log
    assert ("unload", "a") not in fx.log and ("pin", "a") not in fx.log
    assert sched.tier2_booked() == sizes["a"] * MIB          # its weights, in tier 2
    lease = await use(sched, "a")
    assert lease.previous_tier is Tier.RAM and lease.phases.load_mode == "warm"
    # The kept engine is taken back and only its context built; the emptied holder is let go.
    assert fx.log[-3:] == [("load", "a"), ("resume", "a"), ("unpin", "a")]
    assert a.engine is engine and a.pinned is None
    assert sched.tier2_booked() == sizes["b"] * MIB          # b kept now, a booked in tier 1


async def test_round_robin_over_three_keeps_the_two_idle_engines():
    """The swap workload's shape: N=3 > K=1. While a is promoted its weights are booked by
    its placement, so b's demotion finds room in tier 2 (c's weights + b's <= 500 MiB)."""
    fx = FakeEffects()
    sched = make({"a": 250, "b": 250, "c": 250}, fx=fx, context=500)
    for mid in "abcabc":
        await use(sched, mid)
    assert fx.log.count(("suspend", "a")) == 2 and ("pin", "a") not in fx.log
    assert [e for e in fx.log if e[0] == "load"] == [("load", m) for m in "abcabc"]
    assert [e for e in fx.log if e[0] == "resume"] == [("resume", m) for m in "abc"]
    assert {m.id: m.tier for m in sched.models.values()} == {
        "a": Tier.RAM, "b": Tier.RAM, "c": Tier.GPU}
    assert sched.tier2_booked() == 500 * MIB and sched.tier1_booked() == 750 * MIB


async def test_eviction_to_tier_3_frees_the_kept_engine():
    fx = FakeEffects()
    sched = make({"a": 300, "b": 300}, fx=fx)
    await use(sched, "a")
    await use(sched, "b")
    kept = sched.models["a"].pinned
    await sched.move("a", Tier.SSD)
    a = sched.models["a"]
    assert a.tier is Tier.SSD and a.pinned is None and kept.engine is None
    assert fx.log[-2:] == [("unpin", "a"), ("drop", "a")]
    assert sched.tier2_booked() == 0
    await use(sched, "a")
    assert fx.log[-1] == ("load", "a")                       # a cold load, not a resume


async def test_a_full_tier_2_falls_back_to_tier_3():
    fx = FakeEffects()
    sched = make({"a": 600, "b": 600}, fx=fx, context=100)  # 600 MiB > tier 2's 500 MiB
    await use(sched, "a")
    await use(sched, "b")
    assert sched.models["a"].tier is Tier.SSD and ("suspend", "a") not in fx.log
    assert ("unload", "a") in fx.log and ("drop", "a") in fx.log


async def test_beside_a_discrete_gpu_tier_2_stays_the_pinned_files():
    fx = FakeEffects()
    sched = make({"a": 600, "b": 600}, GPU, fx=fx, context=0)
    await use(sched, "a")
    await use(sched, "b")
    assert ("suspend", "a") not in fx.log
    assert fx.log[:4] == [("load", "a"), ("unload", "a"), ("pin", "a"), ("load", "b")]


async def test_other_modalities_pin_their_files():
    fx = FakeEffects()
    sched = make({"a": 300, "b": 300}, modality="embeddings", fx=fx)
    await use(sched, "a")
    await use(sched, "b")
    assert ("suspend", "a") not in fx.log and ("pin", "a") in fx.log
