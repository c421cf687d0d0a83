"""What the scheduler's decisions do to the machine: build and free engines, keep a loaded
engine without its context or pin weights in RAM (tier 2), drop them from the page cache
(tier 3).

`Effects` is the Protocol the scheduler calls; `MachineEffects` the real implementation.
Every method blocks and runs in a worker thread. Tests use the one fake in tests/fakes.py
(``FakeEffects``, checked against this Protocol by tests/scheduler/test_effects_protocol.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from hypnos.engines.protocols import Engine, KeepsWeights, KVChatEngine
from hypnos.engines.records import LoadReport, LoadSpec
from hypnos.engines.registry import create_engine
from hypnos.planner.budgets import kept_engine_booking
from hypnos.planner.context import FALLBACK_CONTEXT
from hypnos.planner.types import Placement
from hypnos.service.scheduling import allocator
from hypnos.service.scheduling.hardware import process_rss, vram_used
from hypnos.service.scheduling.pool import KeptEngine, ModelState


@runtime_checkable
class Effects(Protocol):
    """The scheduler's only ways of touching the machine. Each blocks; each changes the
    model record it is given (``st.engine``, ``st.pinned``) as it says."""

    def load(self, st: ModelState, placement: Placement) -> LoadReport:
        """Build ``st``'s engine for ``placement`` and set ``st.engine``; from a `KeptEngine`
        in ``st.pinned`` (``suspend``) that engine is taken and only its context built. Raises
        EngineUnavailable (503: cannot be served here) or EngineError (500)."""

    def unload(self, st: ModelState) -> None:
        """Free ``st.engine`` and set it to None."""

    def suspend(self, st: ModelState) -> bool:
        """Tier 2 where the engine computes from host memory: free ``st.engine``'s context,
        keep its weights, move it into ``st.pinned`` (a `KeptEngine`) and set ``st.engine``
        to None. False (nothing changed) when the engine cannot."""

    def park(self, st: ModelState) -> object | None:
        """The engine's KV state to keep while it is unloaded (None: nothing to park)."""

    def restore(self, st: ModelState, parked: object) -> tuple[int, float]:
        """Restore parked state after a load: (tokens restored, ms); (0, 0.0) when refused."""

    def pin(self, st: ModelState) -> None:
        """Lock ``st``'s weight files in RAM (tier 2) and set ``st.pinned``."""

    def unpin(self, st: ModelState) -> None:
        """Release ``st.pinned`` and set it to None."""

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

    def __init__(self, metrics=None, threads: int | None = None, rpc_stall_secs: float = 120):
        self.metrics = metrics
        self.threads = threads
        self.rpc_stall_secs = rpc_stall_secs      # hardware.rpc_stall_secs

    def load(self, st: ModelState, placement: Placement) -> LoadReport:
        kept = st.pinned.take() if isinstance(st.pinned, KeptEngine) else None
        engine: Engine
        if placement.remote:        # split across RPC workers: a child process of its own
            from hypnos.engines.llama.split import SplitChatEngine
            if kept is not None:
                kept.unload()
                kept = None
            engine = SplitChatEngine()
        else:
            engine = kept if kept is not None else create_engine(st.cfg.engine, st.cfg.modality)
        options: dict = {"tool_format": st.cfg.tool_format}
        if placement.remote:
            options["rpc_split"] = [(s.endpoint, s.layers) for s in placement.remote]
            options["rpc_stall_secs"] = self.rpc_stall_secs
        spec = LoadSpec(
            model_id=st.id, weights_path=st.paths.get("weights_path"), files=dict(st.paths),
            context_len=placement.allocated_context_len or FALLBACK_CONTEXT, slots=st.cfg.slots,
            # A host placement asks the engine for the CPU (a GPU build would offload).
            gpu_layers=0 if placement.on_host else (placement.gpu_layers or -1),
            cpu_expert_layers=placement.cpu_expert_layers,
            chat_template=st.cfg.chat_template, threads=self.threads, options=options)
        before, vram_before = process_rss(), vram_used()
        try:
            report = engine.load(spec)
        except BaseException:
            if kept is not None:        # a failed load frees the kept weights too
                st.pinned = None
            raise
        grown = process_rss() - before
        st.engine = engine
        st.booked_vs_real = {"booked_bytes": placement.booked_tier1_bytes,
                             "rss_growth_bytes": grown}
        child_rss = getattr(engine, "child_rss", None)
        if child_rss is not None:   # a split model's local part lives in its child process
            st.booked_vs_real["child_rss_bytes"] = child_rss()
        if kept is not None:    # the weights were already resident (tier 2): not in the growth
            st.booked_vs_real["kept_weights_bytes"] = st.weight_bytes
        vram_after = vram_used() if vram_before is not None else None
        if vram_before is not None and vram_after is not None:
            # NVML: the device's growth, and this process's when the driver tells it
            st.booked_vs_real["vram_growth_bytes"] = vram_after[0] - vram_before[0]
            if vram_after[1] is not None:
                st.booked_vs_real["process_vram_bytes"] = vram_after[1]
        if self.metrics is not None:
            self.metrics.promotions.inc()
        return report

    def unload(self, st: ModelState) -> None:
        engine, st.engine = st.engine, None
        if engine is not None:
            engine.unload()
            del engine
            _give_back()

    def suspend(self, st: ModelState) -> bool:
        engine = st.engine
        if not isinstance(engine, KeepsWeights) or st.placement is None or \
                not engine.release_context():
            return False
        booking = kept_engine_booking(st.shape, st.placement)
        st.engine, st.pinned = None, KeptEngine(engine, booking.tier2_bytes)
        _give_back()
        return True

    def park(self, st: ModelState):
        """The engine's parked KV state (None when it has nothing to park or cannot)."""
        return st.engine.park() if isinstance(st.engine, KVChatEngine) else None

    def restore(self, st: ModelState, parked) -> tuple[int, float]:
        """Restore parked slots after a load: (tokens restored, ms); (0, 0) when refused."""
        if isinstance(st.engine, KVChatEngine):
            return st.engine.restore(parked)
        return 0, 0.0

    def pin(self, st: ModelState) -> None:
        from hypnos.engines.residency import PinnedWeights
        st.pinned = PinnedWeights(self._files(st))

    def unpin(self, st: ModelState) -> None:
        pinned, st.pinned = st.pinned, None
        if pinned is not None:
            pinned.release()
            del pinned
            _give_back()

    def drop_pages(self, st: ModelState) -> None:
        from hypnos.engines.residency import drop_page_cache
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
