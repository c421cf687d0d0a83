"""The scheduler counts the process memory it does not book (issue 21), on `FakeEffects`:
where tier 1 is host memory the measured unbooked footprint is taken off tier 1 before a load
is planned, and hardware.max_process_memory_bytes keeps a move to tier 2 from pinning past
it. The footprint is a number the test sets (``rss``), never this process's."""
import pytest

from fakes import FakeEffects
from hypnos.planner.types import MIB, Accelerator, Hardware, ModelShape, Tier, Topology
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.planner.loading import TooBig
from hypnos.service.refusals import LoadRefused
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.scheduler import Scheduler

pytestmark = pytest.mark.anyio

# A CPU-only host of 2000 MiB: tier 1 (half the RAM) 1000 MiB, tier 2 (a quarter) 500 MiB.
CPU = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 2000 * MIB, "fake")
SIMULATED = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 2000 * MIB, "fake",
                     simulated=True)


def make(hw, rss, models=(("chat", "text_generation", 600),)):
    cfg = Config(models=[ModelConfig(id=mid, modality=modality, engine="ggml_llama",
                                     weights_path=f"{mid}.gguf")
                         for mid, modality, _ in models])
    fx = FakeEffects()
    sched = Scheduler(cfg, hw, fx, rss=lambda: rss[0])
    for m, (_, _, mib) in zip(cfg.models, models, strict=True):
        sched.add(ModelState(cfg=m, paths={}, shape=ModelShape(weights_bytes=mib * MIB)))
    return sched, fx


async def test_unbooked_process_memory_is_taken_off_tier_1_on_a_cpu_only_host():
    """Nothing booked, the process at 500 MiB: 1000 - 500 = 500 MiB of tier 1 is left, and
    a 600 MiB model does not fit even alone. At 300 MiB (700 left) it loads; the process
    then books 600 of its 900 MiB and 300 are unbooked."""
    rss = [500 * MIB]
    sched, fx = make(CPU, rss)
    with pytest.raises(LoadRefused) as exc:
        async with sched.lease("chat"):
            pass
    assert isinstance(exc.value.refusal, TooBig)
    assert "tier 1 has 0.49 GiB" in exc.value.message and fx.log == []
    rss[0] = 300 * MIB
    async with sched.lease("chat"):
        pass
    assert sched.models["chat"].tier is Tier.GPU
    rss[0] = 900 * MIB
    memory = sched.process_memory()
    assert (memory.booked_bytes, memory.unbooked_bytes) == (600 * MIB, 300 * MIB)
    assert sched.tier1_unbooked(memory) == 300 * MIB


async def test_a_simulated_machine_is_planned_without_this_process_memory():
    rss = [500 * MIB]
    sched, _ = make(SIMULATED, rss)
    async with sched.lease("chat"):
        pass
    assert sched.models["chat"].tier is Tier.GPU
    assert sched.tier1_unbooked(sched.process_memory()) == 0


async def test_a_move_to_tier_2_that_would_pass_the_process_cap_goes_to_tier_3():
    """A 100 MiB speech model, the process at 950 MiB and a 1000 MiB cap: pinning its files
    would reach 1050 MiB, so it rests in tier 3 (nothing pinned). At 900 MiB it is pinned."""
    rss = [950 * MIB]
    sched, fx = make(CPU, rss, models=(("tts", "text_to_speech", 100),))
    sched.config.hardware.max_process_memory_bytes = 1000 * MIB
    st = await sched.move("tts", Tier.RAM)
    assert st.tier is Tier.SSD and st.pinned is None and ("pin", "tts") not in fx.log
    rss[0] = 900 * MIB
    st = await sched.move("tts", Tier.RAM)
    assert st.tier is Tier.RAM and ("pin", "tts") in fx.log
