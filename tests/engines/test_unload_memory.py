"""Memory that comes back (issue 21): each engine of the default lineup loaded, used and
unloaded N times in a row through the scheduler and the real `MachineEffects`; the process's
resident memory after the last unload is within a bound of where it was after the first.

The bound is one model's own load growth (measured in the first cycle): a leak of one model
per cycle would be N of them. Before `MachineEffects` gave freed memory back
(`allocator.trim`), an onnxruntime or CTranslate2 model left 30-40 MiB in malloc's arenas per
cycle (bench/README.md), more than one model over the 6 cycles. Resident memory is counted,
never timed, so a busy machine does not change the verdict."""
from __future__ import annotations

import asyncio
import io
import math
import struct
import threading
import wave
from pathlib import Path

import pytest

from hypnos.engines.records import ChatRequest, SpeechRequest, TranscribeRequest
from hypnos.planner.types import GIB, MIB, Accelerator, Hardware, Tier, Topology
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.service.scheduling.build import build_state
from hypnos.service.scheduling.effects import MachineEffects
from hypnos.service.scheduling.hardware import process_rss
from hypnos.service.scheduling.scheduler import Scheduler
from conftest import LINEUP_BLOCKS, MODELS_DIR, require_smollm2

pytestmark = [pytest.mark.real]

CYCLES = 6
HOST = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 16 * GIB, "test", simulated=True)


def tone_wav(secs: float = 2.0, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * 0.05)))
                               for i in range(int(secs * rate))))
    return buf.getvalue()


def work(modality: str, engine) -> None:
    """One real request of ``modality`` (blocking; called in a worker thread)."""
    cancel = threading.Event()
    if modality == "text_generation":
        engine.chat(ChatRequest(messages=[{"role": "user", "content": "Tell me a story."}],
                                max_tokens=16), None, cancel)
    elif modality == "embeddings":
        engine.embed([f"sentence number {i}" for i in range(32)], cancel)
    elif modality == "text_to_speech":
        engine.synthesize(SpeechRequest(text="Memory that comes back."), lambda pcm: None,
                          cancel)
    else:
        engine.transcribe(TranscribeRequest(audio=tone_wav()), cancel)


def scheduler_for(modality: str) -> Scheduler:
    block = LINEUP_BLOCKS[modality]
    for key in ("weights_path", "tokenizer_path", "voices_path"):
        if key in block and not (Path(MODELS_DIR) / block[key]).exists():
            pytest.fail(f"{block[key]} is missing from {MODELS_DIR}: run ./run.sh models")
    m = ModelConfig(id="m", modality=modality, context_len=2048, **block)
    cfg = Config(models=[m], models_dir=Path(MODELS_DIR))
    sched = Scheduler(cfg, HOST, MachineEffects(threads=1))
    st = build_state(cfg, m)
    assert st.problem is None, st.problem
    sched.add(st)
    return sched


async def cycle(sched: Scheduler, modality: str) -> tuple[int, int]:
    """Load, serve three requests from worker threads, unload to tier 3: (RSS loaded,
    RSS unloaded)."""
    async with sched.lease("m") as lease:
        await asyncio.gather(*(asyncio.to_thread(work, modality, lease.engine)
                               for _ in range(3)))
        loaded = process_rss()
    await sched.move("m", Tier.SSD)
    assert sched.models["m"].engine is None
    return loaded, process_rss()


@pytest.mark.anyio
@pytest.mark.parametrize("modality", ["text_to_speech", "embeddings", "speech_to_text",
                                      "text_generation"])
async def test_loading_and_unloading_n_times_gives_the_memory_back(modality):
    if modality == "text_generation":
        require_smollm2()
    sched = scheduler_for(modality)
    try:
        await cycle(sched, modality)                  # the libraries' one-time cost
        loaded, start = await cycle(sched, modality)
        one_model = loaded - start
        assert one_model > 16 * MIB                   # the bound below is a real model's
        for _ in range(CYCLES):
            _, end = await cycle(sched, modality)
    finally:
        await sched.shutdown()
    grown = end - start
    assert grown < one_model, (
        f"{modality}: {CYCLES} load/unload cycles left {grown / MIB:.1f} MiB (one model "
        f"loaded grows the process by {one_model / MIB:.1f} MiB)")
