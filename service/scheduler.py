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

from hypnos.engines.base import EngineError, EngineUnavailable, LoadReport
from hypnos.planner import derive_budgets, eviction_order, place, plan_eviction
from hypnos.planner.types import (Budgets, Hardware, MoeOffload, NoFit, Placement,
                                  PlacementRequest, Tier)
from hypnos.service import errors
from hypnos.service.config_schema import PROFILES, Config
from hypnos.service.effects import Effects
from hypnos.service.hardware import process_rss
from hypnos.service.kv_park import KvParkStore
from hypnos.service.pool import ModelState
from hypnos.service.request_log import request_leases


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


class Scheduler:
    def __init__(self, config: Config, hardware: Hardware, effects: Effects):
        self.config = config
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
        while (change := self._changes.get(model_id)) is not None:
            await change.wait()      # then served by the replacement (or 404 once removed)
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
        slot (session watch)."""
        st = self.get(model_id)
        st.leases += 1
        try:
            yield st
        finally:
            st.leases -= 1
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
        req = PlacementRequest(st.shape, tier1_free_bytes=self.budgets.tier1_bytes,
                               slots=st.cfg.slots, context_len=self._context_for(st, per_slot),
                               moe_offload=st.cfg.moe_offload,
                               min_gpu_layer_ratio=st.cfg.min_gpu_layer_ratio,
                               unified_memory=self.budgets.unified_memory)
        whole = place(req)
        if isinstance(whole, NoFit):
            raise errors.InsufficientMemory(
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
        return whole, list(plan.evict)

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
            placement, evict = self._plan(st, per_slot)
            for victim in evict:
                await self._evict(self.models[victim], for_model=st.id, reason="memory_budget")
                lease.evicted.append(victim)
            from_tier = st.tier
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
            st.placement, st.tier, st.last_load = placement, Tier.GPU, report
        lease.phases = report
        st.stats.load_ms[from_tier] = (time.monotonic() - started) * 1000

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
        if st.leases:
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

    # ------------------------------------------------------------------ pool changes

    async def swap(self, model_id: str, new: ModelState | None, drain_secs: float) -> None:
        """PUT / DELETE /v1/models/{id}: hold new leases of ``model_id``, wait up to
        ``drain_secs`` for the running ones to finish, unload the old model, then install
        ``new`` under the same id (None: remove it). Past ``drain_secs`` nothing changes and
        this raises 429 model_busy. Blocks for as long as the drain and the unload take."""
        old = self.get(model_id, enabled_only=False)
        if model_id in self._changes:
            raise errors.ModelBusy(f"The model '{model_id}' is already being changed; retry "
                                   "when that change is done")
        gate = self._changes[model_id] = asyncio.Event()
        try:
            deadline = time.monotonic() + drain_secs
            # Polled: leases are counted in several places (lease, hold, move), none of
            # which needs to know a drain is waiting.
            while old.leases and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if old.leases:
                raise errors.ModelBusy(
                    f"The model '{model_id}' still has {old.leases} requests after drain_secs "
                    f"({drain_secs:g} s); nothing was changed")
            old.enabled = False          # nothing to park: its conversations end here
            async with old.load_lock:
                await self._unload(old, Tier.SSD)
            self.kv_park.take(model_id)
            if new is None:
                del self.models[model_id]
            else:
                self.models[model_id] = new
        finally:
            del self._changes[model_id]
            gate.set()

    async def set_enabled(self, model_id: str, enabled: bool) -> ModelState:
        """POST /v1/models/{id}/enable|disable. Disabling evicts the model to disk and drops
        its parked KV state; 429 model_busy while it is leased."""
        st = self.get(model_id, enabled_only=False)
        if not enabled and st.enabled:
            if st.leases:
                raise errors.ModelBusy(f"The model '{model_id}' is in use; retry when idle")
            st.enabled = False
            async with st.load_lock:
                await self._unload(st, Tier.SSD)
            self.kv_park.take(model_id)
        st.enabled = enabled
        return st

    async def set_moe_offload(self, model_id: str, mode: MoeOffload) -> str:
        """POST /v1/models/{id}/moe-offload: "now" when the model was idle or not loaded (an
        idle resident model is unloaded, its next request loads it with the new placement),
        "next_load" when it is busy."""
        st = self.get(model_id, enabled_only=False)
        st.cfg.moe_offload = mode
        if st.leases:
            return "next_load"
        if st.tier is Tier.GPU:
            async with st.load_lock:
                await self._unload(st, Tier.RAM if st.cfg.keep_warm_in_ram else Tier.SSD)
        return "now"

    def prefetch(self, model_id: str) -> None:
        """x-hypnos-next-model: load ``model_id`` in the background. Unknown, disabled, busy
        or failing models are ignored; the current request never waits for this."""
        st = self.models.get(model_id)
        if st is None or not st.enabled or st.problem or st.tier is Tier.GPU or st.leases:
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
        planned = place(PlacementRequest(
            st.shape, tier1_free_bytes=self.budgets.tier1_bytes, slots=st.cfg.slots,
            context_len=self._context_for(st, None), moe_offload=st.cfg.moe_offload,
            min_gpu_layer_ratio=st.cfg.min_gpu_layer_ratio,
            unified_memory=self.budgets.unified_memory))
        if isinstance(planned, NoFit):
            return Placement(primary_tier=st.tier)
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
