"""The prompt cache's RAM tier is booked in tier 2 and gives way to a model's weights: a
demotion to tier 2 that needs its bytes shrinks it first (FakeEffects)."""
import pytest

from fakes import FakeEffects
from hypnos.engines.llama.prompt_cache import PromptCache
from hypnos.planner.types import MIB, Accelerator, Hardware, ModelShape, Tier, Topology
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.service.scheduling.pool import KeptEngine, ModelState
from hypnos.service.scheduling.scheduler import Scheduler

pytestmark = pytest.mark.anyio

# CPU only: tier 1 = RAM / 2 = 100 MiB, tier 2 = RAM / 4 = 50 MiB.
CPU = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 200 * MIB, "fake", simulated=True)


async def test_a_demotion_to_tier_2_evicts_cache_entries_first():
    cache = PromptCache(ram_bytes=40 * MIB)
    models = [ModelConfig(id=mid, modality="text_generation", engine="ggml_llama",
                          weights_path=f"{mid}.gguf") for mid in "ab"]
    sched = Scheduler(Config(models=models), CPU, FakeEffects(), prompt_cache=cache)
    for m in models:
        sched.add(ModelState(cfg=m, paths={}, shape=ModelShape(weights_bytes=30 * MIB,
                                                               workspace_bytes=40 * MIB)))
    for i in range(4):
        cache.put("a", "id", "p", list(range(1000 * i, 1000 * i + 300)),
                  bytearray(10 * MIB), [], None)
    assert sched.tier2_booked() == cache.ram_used == 40 * MIB
    async with sched.lease("a"):
        pass
    async with sched.lease("b"):
        pass
    a = sched.models["a"]
    assert a.tier is Tier.RAM and isinstance(a.pinned, KeptEngine)
    assert cache.ram_used <= 20 * MIB                  # 50 MiB of tier 2 less a's 30
    assert sched.tier2_booked() == 30 * MIB + cache.ram_used <= 50 * MIB
    # The most valuable entries stayed: the newest.
    assert cache.best("id", "p", list(range(3000, 3300))) is not None


async def test_the_cache_grows_only_into_what_tier_2_has_left():
    cache = PromptCache(ram_bytes=40 * MIB)
    models = [ModelConfig(id=mid, modality="text_generation", engine="ggml_llama",
                          weights_path=f"{mid}.gguf") for mid in "ab"]
    sched = Scheduler(Config(models=models), CPU, FakeEffects(), prompt_cache=cache)
    for m in models:
        sched.add(ModelState(cfg=m, paths={}, shape=ModelShape(weights_bytes=30 * MIB,
                                                               workspace_bytes=40 * MIB)))
    async with sched.lease("a"):
        pass
    async with sched.lease("b"):
        pass
    assert isinstance(sched.models["a"].pinned, KeptEngine)     # 30 of tier 2's 50 MiB
    for i in range(4):
        cache.put("a", "id", "p", list(range(1000 * i, 1000 * i + 300)),
                  bytearray(8 * MIB), [], None)
    assert cache.ram_used <= 20 * MIB
    assert sched.tier2_booked() <= 50 * MIB
