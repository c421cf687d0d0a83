"""What the pool books in each tier, and what the planner is asked for a model: the half of
`Residency` that reads, never moves. ``tier2_booked`` counts the models' pinned bytes and the
prompt cache's RAM tier (which grows only into what the models leave, and shrinks for a
model's weights: ``_tier2_fits``); ``process_memory`` is the footprint the bookings live in;
``request`` / ``plan`` / ``fundable_context`` ask the planner for a model beside the others
in tier 1; ``honest`` re-places an engine that says it computes on the CPU.

Threading: the event loop (``prompt_cache.room`` is read from any thread).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from hypnos.engines.llama.prompt_cache import PromptCache
from hypnos.engines.protocols import ReportsDevice
from hypnos.planner import place, placement_device
from hypnos.planner.context import context_window, fundable_window, funded_context
from hypnos.planner.loading import LoadPlan, LoadRefusal, plan_load
from hypnos.planner.process_memory import (ProcessMemory, process_memory, tier1_unbooked,
                                           usable_budgets)
from hypnos.planner.types import (Budgets, Hardware, NoFit, Placement, PlacementRequest, Tier,
                                  Topology)
from hypnos.planner.workers import WorkerBudget
from hypnos.service.config.schema import Config
from hypnos.service.scheduling.kv_park import Parking
from hypnos.service.scheduling.pool import ModelState


class Bookings:
    def __init__(self, *, config: Config, hardware: Hardware, budgets: Budgets,
                 accelerated: frozenset[str], kv_park: Parking, models: dict[str, ModelState],
                 rss: Callable[[], int], prompt_cache: PromptCache | None = None):
        """See `Residency`, which passes these through."""
        self.config, self.hardware, self.budgets = config, hardware, budgets
        self.accelerated, self.kv_park, self.models, self.rss = accelerated, kv_park, models, rss
        self.prompt_cache = prompt_cache
        if prompt_cache is not None:    # its RAM tier grows only into what tier 2 has left
            prompt_cache.room = lambda: self.budgets.tier2_bytes - self._tier2_models()

    def tier2_booked(self, leaving: str | None = None) -> int:
        """Bytes booked in tier 2, the prompt cache's RAM tier included; ``leaving``: a model
        being promoted, whose tier-2 bytes its tier-1 placement already books (they are
        freed, or move, once it is loaded)."""
        return self._tier2_models(leaving) + self._cache_ram()

    def _tier2_models(self, leaving: str | None = None) -> int:
        return sum(m.pinned.bytes for m in self.models.values()
                   if m.pinned is not None and m.id != leaving)

    def _cache_ram(self) -> int:
        return self.prompt_cache.ram_used if self.prompt_cache is not None else 0

    def _tier2_fits(self, need: int, room_for: str | None) -> bool:
        """Whether ``need`` more bytes fit the tier-2 budget, making room first by shrinking
        the prompt cache's RAM tier (its entries spill to disk or go): a model's weights
        come before cached prompts."""
        free = self.budgets.tier2_bytes - self._tier2_models(room_for) - need
        if free < 0:
            return False
        if self.prompt_cache is not None and self._cache_ram() > free:
            self.prompt_cache.shrink_ram(free)
        return True

    def process_memory(self) -> ProcessMemory:
        """The process's footprint (``rss``, measured now) and the bookings that live in it
        (parked KV states included)."""
        tier1 = [m.placement for m in self.models.values()
                 if m.tier is Tier.GPU and m.placement]
        return process_memory(self.rss(), self.hardware.topology, tier1, self.tier2_booked(),
                              self.kv_park.booked_bytes)

    # ------------------------------------------------------------------ requests to the planner

    def request(self, st: ModelState, per_slot: int | None) -> PlacementRequest:
        """What the planner is asked for ``st`` with tier 1 empty: a shape that can use the
        GPU only when its engine build can (else it is placed in host memory)."""
        shape = st.shape if st.cfg.engine in self.accelerated else \
            replace(st.shape, gpu_capable=False)
        ctx = funded_context(st.cfg.context_len, st.cfg.slots, st.shape.max_context_len,
                             per_slot)
        return PlacementRequest(shape, tier1_free_bytes=self.budgets.tier1_bytes,
                                slots=st.cfg.slots, context_len=ctx,
                                moe_offload=st.cfg.moe_offload,
                                min_gpu_layer_ratio=st.cfg.min_gpu_layer_ratio,
                                unified_memory=self.budgets.unified_memory,
                                discrete_gpu=self.hardware.topology is Topology.DISCRETE)

    def fundable_context(self, st: ModelState) -> int:
        """The per-slot context a client may plan against for ``st``: its `context_window`
        (the trained context when known) narrowed to the most this machine can fund, every
        slot funded, with the model placed alone (`fundable_window`; what other models hold
        is evicted for it)."""
        window = context_window(st.cfg.context_len, st.cfg.slots, st.shape.max_context_len)
        if st.shape.num_layers <= 0 and st.shape.kv_bytes_per_token <= 0:
            return window               # no KV cache: nothing grows with the context
        tier1 = self.budgets.tier1_bytes

        def fits(per_slot: int) -> bool:
            req = replace(self.request(st, per_slot), tier1_free_bytes=tier1)
            return not isinstance(place(req), NoFit)
        return fundable_window(window, fits)

    def with_device(self, st: ModelState, placement: Placement) -> Placement:
        return replace(placement, device=placement_device(
            placement, self.hardware, st.cfg.engine in self.accelerated))

    def plan(self, st: ModelState, per_slot: int | None,
             workers: Sequence[WorkerBudget] = ()) -> LoadPlan | LoadRefusal:
        """`plan_load` for ``st`` beside the other models in tier 1 (split onto ``workers``
        when it does not fit alone): the plan, its placement given its device, or the
        planner's refusal as a value."""
        others = [m for m in self.models.values()
                  if m is not st and m.tier is Tier.GPU and m.placement]
        cap = self.config.hardware.max_process_memory_bytes
        memory = self.process_memory()
        budgets = usable_budgets(self.budgets, tier1_unbooked(self.hardware, memory))
        decision = plan_load(self.request(st, per_slot), [m.as_resident() for m in others],
                             budgets, rss=memory.footprint_bytes, cap=cap, workers=workers)
        if not isinstance(decision, LoadPlan):
            return decision
        return replace(decision, placement=self.with_device(st, decision.placement))

    def honest(self, st: ModelState, placement: Placement) -> Placement:
        """After a load on a real discrete GPU: an engine that reports it computes on the CPU
        (an onnxruntime session that fell back, a CUDA build that found no device) books no
        VRAM; it is re-placed in host memory."""
        hw = self.hardware
        if hw.simulated or hw.topology is not Topology.DISCRETE or \
                not isinstance(st.engine, ReportsDevice) or st.engine.device != "cpu" or \
                placement.booked_tier1_bytes == 0:
            return placement
        host = place(replace(self.request(st, None), shape=replace(st.shape, gpu_capable=False),
                             context_len=placement.allocated_context_len))
        assert not isinstance(host, NoFit)          # a host placement always fits
        return self.with_device(st, host)
