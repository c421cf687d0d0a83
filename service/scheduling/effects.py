"""What the scheduler's decisions do to the machine: build and free engines, keep a loaded
engine without its context or pin weights in RAM (tier 2), drop them from the page cache
(tier 3).

`Effects` is the Protocol the scheduler calls; `MachineEffects` the real implementation.
Every method blocks and runs in a worker thread. Tests use the one fake in tests/fakes.py
(``FakeEffects``, checked against this Protocol by tests/scheduler/test_effects_protocol.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from hypnos.engines.protocols import Engine, KeepsWeights, KVChatEngine, SplitsLayers
from hypnos.engines.records import LoadReport, LoadSpec
from hypnos.engines.registry import create_engine, prepare
from hypnos.planner.budgets import kept_engine_booking
from hypnos.planner.context import FALLBACK_CONTEXT
from hypnos.planner.types import Placement
from hypnos.service.scheduling import allocator
from hypnos.service.scheduling.hardware import process_rss, vram_used
from hypnos.service.scheduling.pool import KeptEngine, ModelState, Pinned


@dataclass(frozen=True)
class Loaded:
    """What `Effects.load` built: the engine, its load report, and what the load cost the
    machine beside what was booked (/v1/memory/status's ``memory_truth``)."""
    engine: Engine
    report: LoadReport
    memory_truth: dict = field(default_factory=dict)


@runtime_checkable
class Effects(Protocol):
    """The scheduler's only ways of touching the machine. Each blocks (the scheduler runs it
    in a worker thread). Each reads the model record it is given (id, config, files, shape,
    placement) and changes nothing in it: what it builds it returns, and `Residency`
    assigns that to the record on the event loop."""

    def prepare(self, st: ModelState) -> bool:
        """Do ahead, once per process, what a first load of ``st``'s engine does besides
        building it (the registry's ``prepare``: docling's imports). Start-up staging calls
        it before /ready says yes, so that work never runs while requests are served. False
        when the engine has nothing to prepare. Raises what the preparation raises."""

    def load(self, st: ModelState, placement: Placement, kept: Engine | None) -> Loaded:
        """Build ``st``'s engine for ``placement``; from ``kept`` (the engine tier 2 kept,
        see ``suspend``) only its context. Raises EngineUnavailable (cannot be served here),
        WorkerLost (an RPC worker went away) or EngineError."""

    def unload(self, st: ModelState, engine: Engine) -> None:
        """Free ``engine`` (``st``'s) and what it holds."""

    def suspend(self, st: ModelState, engine: Engine) -> KeptEngine | None:
        """Tier 2 where the engine computes from host memory: free ``engine``'s context, keep
        its weights, and return the `KeptEngine` tier 2 holds. None (nothing changed, the
        engine still loaded) when it cannot."""

    def park(self, st: ModelState, engine: Engine) -> object | None:
        """The engine's KV state to keep while it is unloaded (None: nothing to park)."""

    def restore(self, st: ModelState, engine: Engine, parked: object) -> tuple[int, float]:
        """Restore parked state after a load: (tokens restored, ms); (0, 0.0) when refused."""

    def pin(self, st: ModelState) -> Pinned:
        """Lock ``st``'s weight files in RAM (tier 2); what holds them."""

    def unpin(self, st: ModelState, pinned: Pinned) -> None:
        """Release what ``pin`` or ``suspend`` returned for ``st``."""

    def drop_pages(self, st: ModelState) -> None:
        """Drop ``st``'s weight files from the page cache (tier 3)."""

    def count_eviction(self, st: ModelState) -> None:
        """Count one eviction of ``st`` (metrics)."""

    def count_load_failure(self, st: ModelState) -> None:
        """Count one failed load of ``st`` (metrics)."""


class MachineEffects:
    """`Effects` on this machine: the engines of the registry, mlock, the page cache. What an
    unload, a suspend or an unpin frees is given back to the system at once
    (`allocator.trim`), not left in malloc's arenas."""

    def __init__(self, metrics=None, threads: int | None = None, rpc_stall_secs: float = 120,
                 prompt_cache=None):
        self.metrics = metrics
        self.threads = threads
        self.rpc_stall_secs = rpc_stall_secs      # hardware.rpc_stall_secs
        self.prompt_cache = prompt_cache          # given to each chat engine built here

    def prepare(self, st: ModelState) -> bool:
        return prepare(st.cfg.engine, st.cfg.modality)

    def load(self, st: ModelState, placement: Placement, kept: Engine | None) -> Loaded:
        engine: Engine
        if placement.remote:        # split across RPC workers: a child process of its own
            from hypnos.engines.llama.split import SplitChatEngine
            if kept is not None:
                kept.unload()
                kept = None
            engine = SplitChatEngine()
        else:
            engine = kept if kept is not None else create_engine(st.cfg.engine, st.cfg.modality)
        options: dict = {"tool_format": st.cfg.tool_format,
                         "speculative": st.cfg.speculative}
        if placement.remote:
            options["rpc_split"] = [(s.endpoint, s.layers) for s in placement.remote]
            options["rpc_stall_secs"] = self.rpc_stall_secs
        elif self.prompt_cache is not None:
            options["prompt_cache"] = self.prompt_cache
        spec = LoadSpec(
            model_id=st.id, weights_path=st.paths.get("weights_path"), files=dict(st.paths),
            context_len=placement.allocated_context_len or FALLBACK_CONTEXT, slots=st.cfg.slots,
            # A host placement asks the engine for the CPU (a GPU build would offload).
            gpu_layers=0 if placement.on_host else (placement.gpu_layers or -1),
            cpu_expert_layers=placement.cpu_expert_layers,
            chat_template=st.cfg.chat_template, threads=self.threads, options=options)
        before, vram_before = process_rss(), vram_used()
        report = engine.load(spec)
        truth = {"booked_bytes": placement.booked_tier1_bytes,
                 "rss_growth_bytes": process_rss() - before}
        if isinstance(engine, SplitsLayers):  # its local part lives in its child process
            truth["child_rss_bytes"] = engine.child_rss()
        if kept is not None:    # the weights were already resident (tier 2): not in the growth
            truth["kept_weights_bytes"] = st.weight_bytes
        vram_after = vram_used() if vram_before is not None else None
        if vram_before is not None and vram_after is not None:
            # NVML: the device's growth, and this process's when the driver tells it
            truth["vram_growth_bytes"] = vram_after[0] - vram_before[0]
            if vram_after[1] is not None:
                truth["process_vram_bytes"] = vram_after[1]
        if self.metrics is not None:
            self.metrics.promotions.inc()
        return Loaded(engine, report, truth)

    def unload(self, st: ModelState, engine: Engine) -> None:
        engine.unload()
        del engine
        _give_back()

    def suspend(self, st: ModelState, engine: Engine) -> KeptEngine | None:
        if not isinstance(engine, KeepsWeights) or st.placement is None or \
                not engine.release_context():
            return None
        booking = kept_engine_booking(st.shape, st.placement)
        _give_back()
        return KeptEngine(engine, booking.tier2_bytes)

    def park(self, st: ModelState, engine: Engine):
        """The engine's parked KV state (None when it has nothing to park or cannot)."""
        return engine.park() if isinstance(engine, KVChatEngine) else None

    def restore(self, st: ModelState, engine: Engine, parked) -> tuple[int, float]:
        """Restore parked slots after a load: (tokens restored, ms); (0, 0) when refused."""
        if isinstance(engine, KVChatEngine):
            return engine.restore(parked)
        return 0, 0.0

    def pin(self, st: ModelState) -> Pinned:
        from hypnos.engines.page_cache import PinnedWeights
        return PinnedWeights(self._files(st))

    def unpin(self, st: ModelState, pinned: Pinned) -> None:
        pinned.release()
        del pinned
        _give_back()

    def drop_pages(self, st: ModelState) -> None:
        from hypnos.engines.page_cache import drop_page_cache
        drop_page_cache(self._files(st))

    def count_eviction(self, st: ModelState) -> None:
        if self.metrics is not None:
            self.metrics.evictions.inc()

    def count_load_failure(self, st: ModelState) -> None:
        if self.metrics is not None:
            self.metrics.load_failures.inc()
            self.metrics.model_load_failures.labels(st.id).inc()

    @staticmethod
    def _files(st: ModelState) -> list[Path]:
        return [p for p in st.paths.values() if p.exists()]


def _give_back() -> None:
    """Return the freed pages of every malloc arena to the system (``malloc_trim``: 1-4 ms
    here, in C, the GIL released). No ``gc.collect()``: the engines free their native memory
    explicitly on unload, so a full collection gave nothing back (bench/unload_memory.py,
    trim+arenas: -3.0 MiB a round with it, +1.6 without) and held the GIL for ~190 ms in a
    server with the lineup's libraries imported, on the path of every swap."""
    allocator.trim()
