"""Tier 2 that is really warm where the engine computes from host memory: a chat model demoted
to tier 2 keeps its loaded llama.cpp model (weights loaded and repacked) and frees only its
context; the promotion builds only a context; an eviction to tier 3 frees it all. Counted
(``LlamaChatEngine.model_loads``, the load report's mode), never timed."""
from __future__ import annotations

import sys
import threading

import pytest

from hypnos.engines.errors import EngineError
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest, LoadSpec
from hypnos.planner import kept_engine_booking, place
from hypnos.planner.types import (Accelerator, Hardware, PlacementRequest, Tier, Topology)
from hypnos.service.config.schema import Config, ModelConfig
from hypnos.service.scheduling.build import model_shape
from hypnos.service.scheduling.effects import MachineEffects
from hypnos.service.scheduling.pool import KeptEngine, ModelState
from hypnos.service.scheduling.scheduler import Scheduler
from conftest import SMOLLM2, read_load_mode, require_smollm2

pytestmark = [pytest.mark.real]

QUESTION = [{"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What is the capital of France?"}]


def answer(engine) -> str:
    return engine.chat(ChatRequest(messages=QUESTION, max_tokens=8, temperature=0), None,
                       threading.Event()).text


def spec(**kw) -> LoadSpec:
    return LoadSpec("smollm2", SMOLLM2, context_len=kw.pop("context_len", 512), slots=1,
                    threads=1, **kw)


def test_release_context_keeps_the_weights_and_the_next_load_builds_only_a_context():
    require_smollm2()
    eng = LlamaChatEngine()
    try:
        first = eng.load(spec())
        assert first.load_mode == read_load_mode() and eng.model_loads == 1
        before = answer(eng)
        assert eng.release_context() is True
        # Tier 2: the model object kept, no context (KV cache, compute buffers) and no decode
        # thread: a request is refused, as after an unload.
        assert eng.holds_weights and eng._model is not None
        assert eng._ctx is None and eng._loop is None and eng.layout is None
        with pytest.raises(EngineError):
            answer(eng)
        again = eng.load(spec(context_len=1024))          # a promotion may size a new context
        assert again.load_mode == "warm" and eng.model_loads == 1     # weights not read again
        assert again.weights_ms < first.weights_ms and again.context_ms > 0
        assert eng.n_ctx_per_slot == 1024
        # The same weights, the same answer: compared at the same context size as before, so
        # that nothing but the kept weights could differ (same build, same batch shape).
        eng.release_context()
        assert eng.load(spec()).load_mode == "warm" and eng.model_loads == 1
        assert answer(eng) == before
        # Other load parameters for the weights (GPU layers) read them in again.
        eng.release_context()
        assert eng.load(spec(gpu_layers=0)).load_mode == read_load_mode() and eng.model_loads == 2
    finally:
        eng.unload()
    assert not eng.holds_weights and eng._ctx is None
    assert eng.release_context() is False                 # nothing left to keep


def mapped(path) -> bool:
    """Whether ``path`` is mapped into this process (Linux's /proc/self/maps)."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        return any(line.rstrip("\n").endswith(str(path)) for line in f)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_weights_are_read_into_memory_where_the_rule_says_and_mapped_otherwise():
    """``cpu.reads_weights``: on a Linux CPU build the weights lie in the process's own memory
    (in huge pages under `hypnos serve`), and the file is not mapped; ``read_weights`` False
    maps it, as llama-server does. What each is, not how fast (bench/README.md)."""
    require_smollm2()
    eng = LlamaChatEngine()
    try:
        read = eng.load(spec())
        assert read.load_mode == read_load_mode()
        assert mapped(SMOLLM2) is (read.load_mode == "mmap")
        first = answer(eng)
        eng.unload()
        assert not mapped(SMOLLM2)
        assert eng.load(spec(options={"read_weights": False})).load_mode == "mmap"
        assert mapped(SMOLLM2)
        # The same weights, kernels, batch shape and thread: the same greedy answer.
        assert answer(eng) == first
    finally:
        eng.unload()


def two_models_cpu_host():
    """Two ids on the SmolLM2 GGUF, on a simulated CPU-only host whose tier 1 (half the RAM)
    holds one of them and whose tier 2 (a quarter) holds the other's weights."""
    models = [ModelConfig(id=mid, modality="text_generation", engine="ggml_llama",
                          weights_path=str(SMOLLM2), context_len=512, slots=1)
              for mid in ("a", "b")]
    shape = model_shape(models[0], {"weights_path": SMOLLM2})
    one = place(PlacementRequest(shape, 1 << 40, slots=1, context_len=512)).booked_tier1_bytes
    hw = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 3 * one, simulated=True)
    sched = Scheduler(Config(models=models), hw, MachineEffects(threads=1))
    assert one <= sched.budgets.tier1_bytes < 2 * one
    assert shape.weights_bytes <= sched.budgets.tier2_bytes < 2 * shape.weights_bytes
    for m in models:
        sched.add(ModelState(cfg=m, paths={"weights_path": SMOLLM2}, shape=shape))
    return sched


@pytest.mark.anyio
async def test_scheduler_keeps_the_engine_in_tier_2_and_frees_it_in_tier_3():
    require_smollm2()
    sched = two_models_cpu_host()
    a, b = sched.models["a"], sched.models["b"]
    try:
        async with sched.lease("a") as lease:
            assert lease.phases.load_mode == read_load_mode()
            engine = a.engine
            placement = a.placement
            before = answer(engine)                       # a conversation to park
        async with sched.lease("b") as lease:
            assert lease.evicted == ["a"]
        # Tier 2 holds a's engine without its context, booked at its weights; tier 1 books b.
        assert a.tier is Tier.RAM and a.engine is None and isinstance(a.pinned, KeptEngine)
        assert a.pinned.engine is engine and engine.holds_weights and engine._ctx is None
        booking = kept_engine_booking(a.shape, placement)
        assert sched.tier2_booked() == a.pinned.bytes == booking.tier2_bytes
        assert sched.tier1_booked() == b.placement.booked_tier1_bytes
        async with sched.lease("a") as lease:             # promotion from tier 2
            assert lease.previous_tier is Tier.RAM and lease.evicted == ["b"]
            # Counted, not timed: the weights were not read again (one model load so far).
            assert lease.phases.load_mode == "warm"
            assert a.engine is engine and engine.model_loads == 1
            # /v1/memory/status's memory_truth says the weights were already resident.
            assert a.booked_vs_real["kept_weights_bytes"] == a.weight_bytes
            # KV parking (on by default) put the conversation back into the new context.
            assert lease.phases.kv_restored_tokens > 10
            assert answer(engine) == before
        assert a.pinned is None and isinstance(b.pinned, KeptEngine)
        assert sched.tier2_booked() == booking.tier2_bytes          # b's weights now
        kept_b = b.pinned.engine
        await sched.move("b", Tier.SSD)                   # eviction to tier 3 frees it all
        assert b.tier is Tier.SSD and b.pinned is None and b.engine is None
        assert not kept_b.holds_weights and sched.tier2_booked() == 0
    finally:
        await sched.shutdown()
    assert not engine.holds_weights
