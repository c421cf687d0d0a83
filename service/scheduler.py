"""The scheduler: the only code that loads, promotes, demotes and evicts models.

``async with scheduler.lease(model_id) as lease:`` is the only way a route reaches an
engine. A lease is counted from admission to the end of the response (streams included), and
a model with a lease is never evicted. Decisions come from the pure planner; effects (engine
load/unload, pinning, dropping pages) go through `Effects`, so tests can drive the scheduler
with a fake engine.

Threading: every method runs on the event loop; blocking effects run in worker threads.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

from hypnos.engines.errors import EngineError, EngineUnavailable
from hypnos.engines.records import LoadReport
from hypnos.planner import (ACCELERATED_ENGINES, derive_budgets, eviction_order, place,
                            placement_device, plan_eviction)
from hypnos.planner.types import (Budgets, Hardware, NoFit, Placement, PlacementRequest,
                                  Tier, Topology)
from hypnos.service import errors
from hypnos.service.config_schema import PROFILES, Config
from hypnos.service.effects import Effects
from hypnos.service.hardware import process_rss
from hypnos.service.kv_park import KvParkStore
from hypnos.service.pool import ModelState
from hypnos.service.pool_changes import PoolChanges
from hypnos.service.request_log import request_leases


class DoesNotFitAlone(errors.InsufficientMemory):
    """507 that no waiting can cure: the model is larger than tier 1 even when empty."""


@dataclass
class Lease:
    """What a request holds while it runs, and what its telemetry reports."""
    model: ModelState
    previous_tier: Tier
    tier_switch_ms: float = 0.0
    evicted: list[str] = field(default_factory=list)
    phases: LoadReport | None = None
    queue_ms: float = 0.0
    estimated_wait_ms: float | None = None

    @property
    def engine(self):
        return self.model.engine


class Scheduler(PoolChanges):
    def __init__(self, config: Config, hardware: Hardware, effects: Effects,
                 accelerated: frozenset[str] | None = None):
        """``accelerated``: the engine kinds whose installed builds can compute on
        ``hardware``'s accelerator (default: every kind that can, as on a machine installed
        for it: what a simulated machine is planned with)."""
        self.config = config
        self.accelerated = ACCELERATED_ENGINES[hardware.accelerator] if accelerated is None \
            else accelerated
        self.kv_park = KvParkStore(config.hardware.kv_park, config.hardware.kv_park_max_bytes)
        self.hardware = hardware
        self.budgets: Budgets = derive_budgets(hardware)
        self.effects = effects
        self.models: dict[str, ModelState] = {}
        self.recent_evictions: deque[dict] = deque(maxlen=32)
        self._place_lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()
        # Models being replaced or removed: new leases wait on the event (spec section 6).
        self._changes: dict[str, asyncio.Event] = {}
        # Busy models whose new requests wait for another model's swap (_plan_or_wait).
        self._held: dict[str, asyncio.Event] = {}

    # ------------------------------------------------------------------ pool

    def add(self, state: ModelState) -> None:
        self.models[state.id] = state

    def get(self, model_id: str, *, enabled_only: bool = True) -> ModelState:
        st = self.models.get(model_id)
        if st is None:
            raise errors.ModelNotFound(f"The model '{model_id}' does not exist; "
                                       "GET /v1/models lists the models in service")
        if enabled_only and not st.enabled:
            raise errors.ModelDisabled(f"The model '{model_id}' is disabled; "
                                       f"POST /v1/models/{model_id}/enable puts it back")
        return st

    def tier1_booked(self) -> int:
        return sum(m.placement.booked_tier1_bytes for m in self.models.values()
                   if m.tier is Tier.GPU and m.placement)

    def tier2_booked(self) -> int:
        return sum(m.pinned.bytes for m in self.models.values() if m.pinned is not None)

    # ------------------------------------------------------------------ leases

    @asynccontextmanager
    async def lease(self, model_id: str, *, deadline_ms: float | None = None,
                    context_len: int | None = None):
        """Admit a request, make its model resident (paying any promotion), hold a slot.

        Raises 404 (unknown/disabled), 429 model_busy (queue full), 503 deadline_unmeetable
        or model_not_available, 507 (does not fit beside leased models).
        """
        while (gate := self._changes.get(model_id) or self._held.get(model_id)) is not None:
            # A pool change (then served by the replacement, or 404 once removed), or a
            # grouped swap to another model (then queued behind it).
            await gate.wait()
        st = self.get(model_id)
        if st.problem:
            raise errors.ModelNotAvailable(st.problem)
        queued = max(0, st.leases - st.cfg.slots)
        if queued >= self.config.limits.max_queue_per_model:
            raise errors.ModelBusy(
                f"The model '{model_id}' has {queued} requests queued "
                f"(max_queue_per_model {self.config.limits.max_queue_per_model}); retry later")
        estimate = st.estimated_wait_ms()
        if deadline_ms is None:
            deadline_ms = self.implicit_deadline_ms()
        if deadline_ms is not None and estimate is not None and estimate > deadline_ms:
            raise errors.DeadlineUnmeetable(
                f"Estimated wait {estimate:.0f} ms exceeds the deadline {deadline_ms:.0f} ms",
                headers={"Retry-After": str(max(1, round(estimate / 1000)))})
        st.leases += 1
        lease = Lease(st, previous_tier=st.tier, estimated_wait_ms=estimate)
        seen = request_leases.get()
        if seen is not None:           # the request log reads the model and its tier switch
            seen.append(lease)
        holding = False
        started = time.monotonic()
        try:
            await self._ensure_resident(st, lease, context_len)
            waited = time.monotonic()
            await st.slots.acquire()
            holding = True
            st.running += 1
            lease.queue_ms = (time.monotonic() - waited) * 1000
            yield lease
        finally:
            if holding:
                st.running -= 1
                st.slots.release()
                st.stats.record_request((time.monotonic() - started) * 1000)
            st.leases -= 1
            st.last_used = time.monotonic()

    def implicit_deadline_ms(self) -> float | None:
        """With limits.overload = "shed", the profile's objective is the deadline of every
        request that names none (spec section 1)."""
        profile = self.config.server.profile
        if self.config.limits.overload != "shed" or profile is None:
            return None
        return PROFILES[profile][1]

    @asynccontextmanager
    async def hold(self, model_id: str):
        """Keep ``model_id`` from being evicted while held, without loading it or taking a
        slot (session watch, a prompt being counted). Waits like a lease while the model is
        being swapped out (a hold taken after the plan would be unloaded under it)."""
        while (gate := self._changes.get(model_id) or self._held.get(model_id)) is not None:
            await gate.wait()
        st = self.get(model_id)
        st.holds += 1
        try:
            yield st
        finally:
            st.holds -= 1
            st.last_used = time.monotonic()

    async def _ensure_resident(self, st: ModelState, lease: Lease,
                               context_len: int | None) -> None:
        async with st.load_lock:
            if st.tier is Tier.GPU and not self._needs_rebuild(st, context_len):
                return
            if st.tier is Tier.GPU:   # a larger context: wait for running requests, rebuild
                await self._drain_slots(st)
                try:
                    await self._unload(st, to=Tier.RAM if st.cfg.keep_warm_in_ram else Tier.SSD)
                    await self._promote(st, lease, context_len)
                finally:
                    self._release_slots(st)
                return
            await self._promote(st, lease, context_len)

    def _needs_rebuild(self, st: ModelState, context_len: int | None) -> bool:
        if not context_len or st.placement is None or st.shape.num_layers == 0:
            return False
        per_slot = st.placement.allocated_context_len // max(1, st.cfg.slots)
        return context_len > per_slot

    async def _drain_slots(self, st: ModelState) -> None:
        for _ in range(st.cfg.slots):
            await st.slots.acquire()

    def _release_slots(self, st: ModelState) -> None:
        for _ in range(st.cfg.slots):
            st.slots.release()

    # ------------------------------------------------------------------ placement

    def context_window(self, st: ModelState) -> int:
        """The per-slot context a client may plan against: the model's trained context when
        known (a larger num_ctx rebuilds up to it), else what the config funds per slot."""
        if st.shape.max_context_len:
            return st.shape.max_context_len
        return (st.cfg.context_len or 4096 * st.cfg.slots) // max(1, st.cfg.slots)

    def _context_for(self, st: ModelState, per_slot: int | None) -> int:
        """Context funded across all slots: the config's, or the larger per-slot need."""
        base = st.cfg.context_len or min(st.shape.max_context_len or 4096, 8192) * st.cfg.slots
        if per_slot:
            base = max(base, per_slot * st.cfg.slots)
        if st.shape.max_context_len:
            base = min(base, st.shape.max_context_len * st.cfg.slots)
        return base

    def _plan(self, st: ModelState, per_slot: int | None) -> tuple[Placement, list[str]]:
        """Placement for ``st`` and the models to evict first. Raises 507. Pure decision."""
        others = [m for m in self.models.values()
                  if m is not st and m.tier is Tier.GPU and m.placement]
        free = self.budgets.tier1_bytes - sum(m.placement.booked_tier1_bytes for m in others)
        req = self._request(st, per_slot)
        whole = place(req)
        if isinstance(whole, NoFit):
            raise DoesNotFitAlone(
                f"The model '{st.id}' does not fit this machine even alone: needs "
                f"{whole.needed_bytes / 2**30:.2f} GiB, tier 1 has "
                f"{self.budgets.tier1_bytes / 2**30:.2f} GiB ({whole.reason})")
        need = whole.booked_tier1_bytes
        plan = plan_eviction(need, free, [m.as_resident() for m in others])
        if not plan.fits:
            # Not everything fits beside the leased models: try a partial placement.
            evictable = set(eviction_order([m.as_resident() for m in others]))
            leased_free = free + sum(m.placement.booked_tier1_bytes for m in others
                                     if m.id in evictable)
            partial = place(replace(req, tier1_free_bytes=leased_free))
            if not isinstance(partial, NoFit):
                plan = plan_eviction(partial.booked_tier1_bytes, free,
                                     [m.as_resident() for m in others])
            if isinstance(partial, NoFit) or not plan.fits:
                raise errors.InsufficientMemory(
                    f"The model '{st.id}' needs {need / 2**30:.2f} GiB of tier 1 and only "
                    f"{leased_free / 2**30:.2f} GiB can be freed beside the models in use; "
                    "retry later")
            whole = partial
        self._check_process_cap(st, whole, plan.evict)
        return self._with_device(st, whole), list(plan.evict)

    def _request(self, st: ModelState, per_slot: int | None) -> PlacementRequest:
        """What the planner is asked for ``st`` with tier 1 empty: a shape that can use the
        GPU only when its engine build can (else it is placed in host memory)."""
        shape = st.shape if st.cfg.engine in self.accelerated else \
            replace(st.shape, gpu_capable=False)
        return PlacementRequest(shape, tier1_free_bytes=self.budgets.tier1_bytes,
                                slots=st.cfg.slots, context_len=self._context_for(st, per_slot),
                                moe_offload=st.cfg.moe_offload,
                                min_gpu_layer_ratio=st.cfg.min_gpu_layer_ratio,
                                unified_memory=self.budgets.unified_memory,
                                discrete_gpu=self.hardware.topology is Topology.DISCRETE)

    def _with_device(self, st: ModelState, placement: Placement) -> Placement:
        return replace(placement, device=placement_device(
            placement, self.hardware, st.cfg.engine in self.accelerated))

    def _honest(self, st: ModelState, placement: Placement) -> Placement:
        """After a load on a real discrete GPU: an engine that reports it computes on the CPU
        (an onnxruntime session that fell back, a CUDA build that found no device) books no
        VRAM; it is re-placed in host memory."""
        hw = self.hardware
        if hw.simulated or hw.topology is not Topology.DISCRETE or \
                getattr(st.engine, "device", None) != "cpu" or placement.booked_tier1_bytes == 0:
            return placement
        host = place(replace(self._request(st, None), shape=replace(st.shape, gpu_capable=False),
                             context_len=placement.allocated_context_len))
        return self._with_device(st, host)

    def _check_process_cap(self, st: ModelState, placement: Placement, evict) -> None:
        cap = self.config.hardware.max_process_memory_bytes
        if not cap:
            return
        freed = sum(self.models[m].placement.booked_tier1_bytes for m in evict)
        projected = process_rss() - freed + placement.booked_tier1_bytes
        if projected > cap:
            raise errors.ProcessMemoryCap(
                f"Loading '{st.id}' would take the process to {projected / 2**30:.2f} GiB, "
                f"above hardware.max_process_memory_bytes ({cap / 2**30:.2f} GiB)")

    async def _promote(self, st: ModelState, lease: Lease, per_slot: int | None) -> None:
        lease.previous_tier = st.tier
        started = time.monotonic()
        # Shielded: a client that hangs up during a cold start must not leave an engine
        # built but unbooked. The load finishes and is booked; the caller sees its cancel.
        task = asyncio.ensure_future(self._load_locked(st, lease, per_slot, started))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.shield(task)
        lease.tier_switch_ms = (time.monotonic() - started) * 1000

    async def _load_locked(self, st: ModelState, lease: Lease, per_slot: int | None,
                           started: float) -> None:
        async with self._place_lock:
            if st.tier is Tier.GPU and st.engine is not None:
                return          # another request loaded it while this one waited
            held: list[str] = []
            try:
                placement, evict = await self._plan_or_wait(st, per_slot, held)
                from_tier = st.tier
                report = await self._load_planned(st, lease, placement, evict)
            finally:
                for model_id in held:       # their waiting requests queue behind this load
                    self._held.pop(model_id).set()
        lease.phases = report
        st.stats.load_ms[from_tier] = (time.monotonic() - started) * 1000

    async def _plan_or_wait(self, st: ModelState, per_slot: int | None,
                            held: list[str]) -> tuple[Placement, list[str]]:
        """Plan ``st``'s load. When it does not fit beside busy models, group the swap: hold
        their new requests (ids appended to ``held``; the caller releases them once this
        load is done) and wait up to limits.swap_wait_ms for the requests they already
        admitted to finish. The requests of the resident model that were queued finish
        first, and the ones arriving later wait one swap instead of starving ``st``. Past
        the bound: 507 as before. Caller holds _place_lock."""
        deadline = time.monotonic() + self.config.limits.swap_wait_ms / 1000
        while True:
            try:
                placement, evict = self._plan(st, per_slot)
            except DoesNotFitAlone:
                raise
            except errors.InsufficientMemory:
                busy = [m.id for m in self.models.values()
                        if m is not st and m.tier is Tier.GPU and m.in_use]
                if not busy or time.monotonic() >= deadline:
                    raise
                self._hold_new_requests(busy, held)
                # Polled: a lease ends in several places (lease, hold, move).
                await asyncio.sleep(0.01)
                continue
            # In the same step as the plan: no request can lease a victim before its eviction.
            self._hold_new_requests(evict, held)
            return placement, evict

    def _hold_new_requests(self, model_ids: list[str], held: list[str]) -> None:
        for model_id in model_ids:
            if model_id not in self._held:
                self._held[model_id] = asyncio.Event()
                held.append(model_id)

    async def _load_planned(self, st: ModelState, lease: Lease, placement: Placement,
                            evict: list[str]) -> LoadReport:
        for victim in evict:
            await self._evict(self.models[victim], for_model=st.id, reason="memory_budget")
            lease.evicted.append(victim)
        try:
            report = await asyncio.to_thread(self.effects.load, st, placement)
        except EngineUnavailable as exc:
            st.problem = str(exc)
            raise errors.ModelNotAvailable(str(exc)) from None
        except EngineError as exc:
            self.effects.count_load_failure(st)
            raise errors.ServerError(f"Loading '{st.id}' failed: {exc}") from None
        if st.pinned is not None:
            await asyncio.to_thread(self.effects.unpin, st)
        parked = self.kv_park.take(st.id)
        if parked is not None:
            tokens, ms = await asyncio.to_thread(self.effects.restore, st, parked)
            report.kv_restored_tokens, report.kv_restore_ms = tokens, ms
        st.placement, st.tier, st.last_load = self._honest(st, placement), Tier.GPU, report
        return report

    async def _evict(self, victim: ModelState, *, for_model: str, reason: str) -> None:
        to = Tier.RAM if victim.cfg.keep_warm_in_ram else Tier.SSD
        async with victim.load_lock:
            to = await self._unload(victim, to)
        self.recent_evictions.append({
            "model": victim.id, "for_model": for_model, "reason": reason,
            "to_tier": str(to), "unix_ms": int(time.time() * 1000)})
        self.effects.count_eviction(victim)

    async def _unload(self, st: ModelState, to: Tier) -> Tier:
        """Demote ``st`` from tier 1 (or 2) to ``to``; returns where it really went (tier 2
        falls back to 3 when the tier-2 budget is full). Caller holds st.load_lock."""
        if st.engine is not None:
            if self.kv_park.enabled and st.enabled:
                self.kv_park.put(st.id, await asyncio.to_thread(self.effects.park, st))
            await asyncio.to_thread(self.effects.unload, st)
        if to is Tier.RAM and st.pinned is None:
            if self.tier2_booked() + st.weight_bytes > self.budgets.tier2_bytes:
                to = Tier.SSD
            else:
                await asyncio.to_thread(self.effects.pin, st)
        if to is Tier.SSD:
            if st.pinned is not None:
                await asyncio.to_thread(self.effects.unpin, st)
            await asyncio.to_thread(self.effects.drop_pages, st)
        st.tier = to
        st.placement = None if to is not Tier.GPU else st.placement
        return to

    # ------------------------------------------------------------------ manual moves

    async def move(self, model_id: str, target: Tier, context_len: int | None = None,
                   *, allow_disabled: bool = False) -> ModelState:
        """POST /v1/memory/tier and startup staging. 429 while leased, 507 when it cannot fit.
        Blocks for as long as the load takes."""
        st = self.get(model_id, enabled_only=not allow_disabled)
        if st.in_use:
            raise errors.ModelBusy(f"The model '{model_id}' is in use; retry when it is idle")
        lease = Lease(st, previous_tier=st.tier)
        st.leases += 1     # a move is a lease of its own: nothing evicts the model meanwhile
        try:
            if target is Tier.GPU:
                await self._ensure_resident(st, lease, context_len)
            else:
                async with st.load_lock:
                    if st.tier is not target:
                        await self._unload(st, target)
        finally:
            st.leases -= 1
        return st

    def prefetch(self, model_id: str) -> None:
        """x-hypnos-next-model: load ``model_id`` in the background. Unknown, disabled, busy
        or failing models are ignored; the current request never waits for this."""
        st = self.models.get(model_id)
        if st is None or not st.enabled or st.problem or st.tier is Tier.GPU or st.in_use:
            return

        async def load():
            try:
                await self.move(model_id, Tier.GPU)
            except errors.HypnosError:
                pass
        task = asyncio.get_running_loop().create_task(load())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def placement_of(self, st: ModelState) -> Placement:
        """Current placement, or what it would be with tier 1 empty when not resident."""
        if st.placement is not None:
            return st.placement
        planned = place(self._request(st, None))
        if isinstance(planned, NoFit):
            return Placement(primary_tier=st.tier)
        planned = self._with_device(st, planned)
        return Placement(**{**planned.__dict__, "primary_tier": st.tier,
                            "pinned_ram_bytes": st.pinned.bytes if st.pinned else 0,
                            "vram_weight_bytes": 0, "vram_kv_and_workspace_bytes": 0,
                            "gpu_layers": 0,
                            "ssd_layers": planned.gpu_layers + planned.pinned_ram_layers
                            if st.tier is Tier.SSD else 0,
                            "pinned_ram_layers": planned.gpu_layers + planned.pinned_ram_layers
                            if st.tier is Tier.RAM else 0})

    async def shutdown(self) -> None:
        for st in self.models.values():
            if st.engine is not None:
                await asyncio.to_thread(self.effects.unload, st)
            if st.pinned is not None:
                await asyncio.to_thread(self.effects.unpin, st)
