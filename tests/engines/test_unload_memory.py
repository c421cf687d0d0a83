"""Memory that comes back (issue 21): each engine of the default lineup loaded, used and
unloaded N times in a row through the scheduler and the real `MachineEffects`; the process's
resident memory after the last unload is within a bound of where it was after the first.

The bound is one model's own load growth (measured in the first counted cycle): a leak of
one model per cycle would be N of them. Before `MachineEffects` gave freed memory back
(`allocator.trim`), an onnxruntime or CTranslate2 model left 30-45 MiB in malloc's arenas per
cycle (bench/README.md, unload_memory.py), more than one model over the 6 cycles. Resident
memory is counted, never timed, so a busy machine does not change the verdict."""
from __future__ import annotations

import sys

import pytest

from hypnos.planner.types import MIB
from conftest import MODELS_DIR, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from unload_memory import cycle, scheduler_for  # noqa: E402

pytestmark = [pytest.mark.real]

CYCLES = 6


@pytest.mark.anyio
@pytest.mark.parametrize("modality", ["text_to_speech", "embeddings", "speech_to_text",
                                      "text_generation"])
async def test_loading_and_unloading_n_times_gives_the_memory_back(modality):
    sched = scheduler_for(modality, MODELS_DIR)
    problem = sched.models["m"].problem
    if problem:
        pytest.fail(problem)
    try:
        await cycle(sched, modality)                  # the libraries' one-time cost
        loaded, start = await cycle(sched, modality)
        one_model = loaded - start
        assert one_model > 16 * MIB                   # the bound below is a real model's
        for _ in range(CYCLES):
            _, end = await cycle(sched, modality)
        assert sched.models["m"].engine is None
    finally:
        await sched.shutdown()
    grown = end - start
    assert grown < one_model, (
        f"{modality}: {CYCLES} load/unload cycles left {grown / MIB:.1f} MiB (one model "
        f"loaded grows the process by {one_model / MIB:.1f} MiB)")
