"""What the scheduler's decisions do to the machine: build and free engines, pin weights in
RAM (tier 2), drop them from the page cache (tier 3).

Every method blocks and runs in a worker thread. Tests replace `Effects` with a fake.
"""
from __future__ import annotations

from pathlib import Path

from hypnos.engines.records import LoadReport, LoadSpec
from hypnos.engines.registry import create_engine
from hypnos.planner.types import Placement
from hypnos.service.hardware import process_rss, vram_used
from hypnos.service.pool import ModelState


class Effects:
    def __init__(self, metrics=None, threads: int | None = None):
        self.metrics = metrics
        self.threads = threads

    def load(self, st: ModelState, placement: Placement) -> LoadReport:
        engine = create_engine(st.cfg.engine, st.cfg.modality)
        spec = LoadSpec(
            model_id=st.id, weights_path=st.paths.get("weights_path"), files=dict(st.paths),
            context_len=placement.allocated_context_len or 4096, slots=st.cfg.slots,
            # A host placement asks the engine for the CPU (a GPU build would offload).
            gpu_layers=0 if placement.on_host else (placement.gpu_layers or -1),
            cpu_expert_layers=placement.cpu_expert_layers,
            chat_template=st.cfg.chat_template, threads=self.threads,
            options={"tool_format": st.cfg.tool_format})
        before, vram_before = process_rss(), vram_used()
        report = engine.load(spec)
        grown = process_rss() - before
        st.engine = engine
        st.booked_vs_real = {"booked_bytes": placement.booked_tier1_bytes,
                             "rss_growth_bytes": grown}
        vram_after = vram_used() if vram_before is not None else None
        if vram_after is not None:     # NVML: the device's growth, and this process's when told
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

    def park(self, st: ModelState):
        """The engine's parked KV state (None when it has nothing to park or cannot)."""
        park = getattr(st.engine, "park", None)
        return park() if park is not None else None

    def restore(self, st: ModelState, parked) -> tuple[int, float]:
        """Restore parked slots after a load: (tokens restored, ms); (0, 0) when refused."""
        restore = getattr(st.engine, "restore", None)
        return restore(parked) if restore is not None else (0, 0.0)

    def pin(self, st: ModelState) -> None:
        from hypnos.engines.residency import PinnedWeights
        st.pinned = PinnedWeights(self._files(st))

    def unpin(self, st: ModelState) -> None:
        pinned, st.pinned = st.pinned, None
        if pinned is not None:
            pinned.release()

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
