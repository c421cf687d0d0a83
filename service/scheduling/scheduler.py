"""The scheduler: the only code that loads, promotes, demotes and evicts models.

``async with scheduler.lease(model_id) as lease:`` is the only way a route reaches an
engine. Reading a lease top-down:

1. **Gates**: while the model is being replaced or removed (`PoolChanges`), or while
   another model's swap gates its new requests (`Residency.swap_gates`), the lease waits.
2. **Admission** (`planner.admission.admit`): `Busy` when the model's queue is full,
   `OverDeadline` when the estimated wait exceeds the deadline. An admitted request is
   counted (``leases``) from here to the end of its response (streams included); a counted
   model is never evicted.
3. **Residency** (`Residency.ensure`): the model is loaded into tier 1 when it is not
   there, paying any eviction; the load decision is `planner.loading.plan_load`. A load
   that does not fit beside busy models waits (up to limits.swap_wait_ms) for their
   leases to end.
4. **Slot**: the request waits for one of the model's execution slots, then runs.
5. **End**: `_counted` is the one place a lease (or hold, or move) ends: it uncounts the
   model and notifies ``released``, the `Wakeup` every waiting load and drain sleeps on.

Effects (engine load/unload, pinning, dropping pages) go through `Effects`, so tests drive
the scheduler with a fake engine. What it refuses it raises as a `refusals.Refused` (typed,
no HTTP here; the HTTP layer maps each to its status). Threading: every method runs on the
event loop; blocking effects run in worker threads.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

from hypnos.engines.llama.prompt_cache import PromptCache
from hypnos.engines.protocols import Engine
from hypnos.planner import ACCELERATED_ENGINES, derive_budgets, kv_park_cap, place
from hypnos.planner.admission import DeadlineMiss, QueueFull, admit, implicit_deadline
from hypnos.planner.process_memory import ProcessMemory, tier1_unbooked
from hypnos.planner.sharing import shared_draft_bytes
from hypnos.planner.types import Budgets, Hardware, NoFit, Placement, Tier
from hypnos.service.config.schema import PROFILES, Config
from hypnos.service.scheduling.effects import Effects
from hypnos.service.scheduling.hardware import process_rss
from hypnos.service.scheduling.kv_park import CacheParking, KvParkStore, Parking
from hypnos.service.scheduling.lease import Lease
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.pool_changes import PoolChanges
from hypnos.service.scheduling.prompt_cache import build_prompt_cache
from hypnos.service.refusals import (Busy, DisabledModel, NotLoaded, NotServable,
                                     OverDeadline, Refused, UnknownModel)
from hypnos.service.scheduling.residency import Residency
from hypnos.service.scheduling.rpc_workers import RpcWorkers
from hypnos.service.scheduling.wakeup import Wakeup

__all__ = ["Fit", "Scheduler"]

# A lease's check on the loaded engine (`Scheduler.lease`): the per-slot context it needs
# when what is loaded will not do, None when it will.
Fit = Callable[[Engine], Awaitable[int | None]]


class Scheduler:
    def __init__(self, config: Config, hardware: Hardware, effects: Effects,
                 accelerated: frozenset[str] | None = None, *,
                 rss: Callable[[], int] = process_rss,
                 prompt_cache: PromptCache | None = None):
        """``accelerated``: the engine kinds whose installed builds can compute on
        ``hardware``'s accelerator (default: every kind that can, as on a machine installed
        for it: what a simulated machine is planned with). ``rss``: reads the process's
        resident memory for the hardware.max_process_memory_bytes check (tests pass one).
        ``prompt_cache``: the chat engines' prompt cache (`build_prompt_cache`; None: one in
        RAM only when hardware.prompt_cache is on), booked in tier 2."""
        self.config = config
        self.accelerated = ACCELERATED_ENGINES[hardware.accelerator] if accelerated is None \
            else accelerated
        self.hardware = hardware
        self.prompt_cache = prompt_cache if prompt_cache is not None else \
            build_prompt_cache(config, hardware, None)
        # KV parking: a use of the prompt cache when there is one, else its own store.
        park_cap = kv_park_cap(config.hardware.kv_park_max_bytes, hardware.ram_bytes)
        self.kv_park: Parking = (CacheParking(config.hardware.kv_park, self.prompt_cache)
                                 if self.prompt_cache is not None
                                 else KvParkStore(config.hardware.kv_park, park_cap))
        self.budgets: Budgets = derive_budgets(hardware)
        self.effects = effects
        self.models: dict[str, ModelState] = {}
        # Notified when a lease, hold, move, load or unload ends: what waiting loads and
        # drains sleep on (there is no polling).
        self.released = Wakeup()
        self.rpc_workers = RpcWorkers(config.hardware.rpc_workers)
        self.residency = Residency(
            config=config, hardware=hardware, budgets=self.budgets,
            accelerated=self.accelerated, effects=effects, kv_park=self.kv_park,
            models=self.models, released=self.released, rss=rss, rpc=self.rpc_workers,
            prompt_cache=self.prompt_cache)
        self.pool = PoolChanges(models=self.models, get=self.get, residency=self.residency,
                                kv_park=self.kv_park, released=self.released)
        self._background: set[asyncio.Task] = set()

    @property
    def recent_evictions(self) -> deque[dict]:
        return self.residency.recent_evictions

    # ------------------------------------------------------------------ pool

    def add(self, state: ModelState) -> None:
        """Put ``state`` in the pool: a new model, or in place of one of the same id that
        nothing uses (staging re-checks the models whose files were missing at start)."""
        old = self.models.get(state.id)
        assert old is None or not old.in_use and old.engine is None and old.pinned is None, \
            f"{state.id} is in use"
        self.models[state.id] = state

    def resolve(self, name: str) -> str:
        """The id of the model ``name`` names: its own id, or one of its ``aliases``."""
        if name in self.models:
            return name
        return next((st.id for st in self.models.values() if name in st.cfg.aliases), name)

    def get(self, model_id: str, *, enabled_only: bool = True) -> ModelState:
        st = self.models.get(self.resolve(model_id))
        if st is None:
            raise UnknownModel(f"The model '{model_id}' does not exist; "
                               "GET /v1/models lists the models in service")
        if enabled_only and not st.enabled:
            raise DisabledModel(f"The model '{model_id}' is disabled; "
                                f"POST /v1/models/{model_id}/enable puts it back")
        return st

    def tier1_booked(self) -> int:
        """Tier-1 bookings of the resident models, shared draft weights once."""
        placements = [m.placement for m in self.models.values()
                      if m.tier is Tier.GPU and m.placement]
        return sum(p.booked_tier1_bytes for p in placements) - shared_draft_bytes(placements)

    def tier2_booked(self) -> int:
        return self.residency.tier2_booked()

    def process_memory(self) -> ProcessMemory:
        """The process's footprint, measured now, and the bookings that live in it."""
        return self.residency.process_memory()

    def tier1_unbooked(self, memory: ProcessMemory) -> int:
        """What of ``memory``'s unbooked bytes the planner takes off tier 1."""
        return tier1_unbooked(self.hardware, memory)

    # ------------------------------------------------------------------ leases

    def _gate(self, model_id: str) -> asyncio.Event | None:
        """What new requests of ``model_id`` wait on now: its change (`PoolChanges`), or a
        grouped swap to another model that gates them (`Residency.swap_gates`); None:
        nothing."""
        return self.pool.gate(model_id) or self.residency.swap_gates.get(model_id)

    async def _pass_gates(self, model_id: str) -> None:
        """Wait while ``model_id`` is being changed (then served by the replacement, or
        `UnknownModel` once removed) or while a grouped swap to another model gates its new
        requests (then queued behind it)."""
        while (gate := self._gate(model_id)) is not None:
            await gate.wait()

    @contextmanager
    def _counted(self, st: ModelState, *, hold: bool = False,
                 touch: bool = True) -> Iterator[None]:
        """Count a lease (or a ``hold``) of ``st`` for the duration of the block: a counted
        model is never evicted. The one place a lease ends: the count drops, ``last_used``
        is stamped (``touch``) and ``released`` wakes whoever waits for a model to be
        idle."""
        if hold:
            st.holds += 1
        else:
            st.leases += 1
        try:
            yield
        finally:
            if hold:
                st.holds -= 1
            else:
                st.leases -= 1
            if touch:
                st.last_used = time.monotonic()
            self.released.notify()

    @asynccontextmanager
    async def lease(self, model_id: str, *, deadline_ms: float | None = None,
                    context_len: int | None = None, fit: Fit | None = None,
                    on_admit: Callable[[Lease], None] | None = None
                    ) -> AsyncIterator[Lease]:
        """Admit a request, make its model resident (paying any promotion), hold a slot.

        ``context_len`` is the per-slot context the request needs. With ``fit`` (an async
        ``fit(engine) -> int | None``, e.g. counting a chat prompt on the loaded tokenizer),
        ``context_len`` is only the estimate a cold load is sized for: a model already in
        tier 1 is not rebuilt for it. ``fit`` runs once on the resident engine and returns
        the context it really needs when what is loaded will not do (None when it will);
        the model is then rebuilt for that, still under this one lease. What ``fit`` raises
        ends the lease. ``on_admit(lease)`` runs once the request is admitted, before any
        load (so the caller's record names the model and its tier switch even when the load
        fails).

        Raises a `Refused`: UnknownModel, DisabledModel, Busy (queue full), OverDeadline,
        NotServable, LoadRefused (does not fit, beside the leased models or at all, or above
        the process memory cap), LoadFailed (the engine's load raised).
        """
        await self._pass_gates(model_id)
        st = self.get(model_id)
        if st.problem:
            raise NotServable(st.problem)
        limit = self.config.limits.max_queue_per_model
        decision = admit(leases=st.leases, slots=st.cfg.slots, max_queue=limit,
                         estimated_wait_ms=st.estimated_wait_ms(),
                         deadline_ms=self.implicit_deadline_ms() if deadline_ms is None
                         else deadline_ms)
        if isinstance(decision, QueueFull):
            raise Busy(f"The model '{model_id}' has {decision.queued} requests queued "
                       f"(max_queue_per_model {limit}); retry later")
        if isinstance(decision, DeadlineMiss):
            raise OverDeadline(
                f"Estimated wait {decision.estimated_wait_ms:.0f} ms exceeds the deadline "
                f"{decision.deadline_ms:.0f} ms", retry_after_s=decision.retry_after_s)
        with self._counted(st):
            lease = Lease(st, previous_tier=st.tier, estimated_wait_ms=decision.estimated_wait_ms)
            if on_admit is not None:
                on_admit(lease)
            started = time.monotonic()
            if fit is None:
                lease.add(await self.residency.ensure(st, context_len))
            else:
                lease.add(await self.residency.ensure(
                    st, None if st.tier is Tier.GPU else context_len))
                async with st.load_lock:   # no rebuild swaps the engine mid-count
                    need = await fit(lease.engine)
                if need is not None:
                    lease.add(await self.residency.ensure(st, need))
            waited = time.monotonic()
            async with st.slots:
                st.running += 1
                lease.queue_ms = (time.monotonic() - waited) * 1000
                try:
                    yield lease
                finally:
                    st.running -= 1
                    st.stats.record_request((time.monotonic() - started) * 1000)
                    if lease.prefill_tokens_per_s:
                        st.stats.prefill_tps = lease.prefill_tokens_per_s
                    if st.lost:
                        self._background_task(self.residency.drop_lost(st))

    def implicit_deadline_ms(self) -> float | None:
        """With limits.overload = "shed", the profile's objective is the deadline of every
        request that names none (spec section 1)."""
        profile = self.config.server.profile
        objective = PROFILES[profile][1] if profile is not None else None
        return implicit_deadline(self.config.limits.overload, objective)

    @asynccontextmanager
    async def hold(self, model_id: str) -> AsyncIterator[ModelState]:
        """Keep ``model_id`` from being evicted while held, without loading it or taking a
        slot (session watch, a prompt being counted). Waits like a lease while the model is
        being swapped out (a hold taken after the plan would be unloaded under it)."""
        await self._pass_gates(model_id)
        st = self.get(model_id)
        with self._counted(st, hold=True):
            yield st

    @asynccontextmanager
    async def hold_engine(self, model_id: str) -> AsyncIterator[Engine]:
        """`hold` for a call on the loaded engine: yields the engine it holds, read once the
        hold's wait ended (a swap it waited for may have unloaded the model); `NotLoaded`
        when there is none."""
        async with self.hold(model_id) as st:
            engine = st.engine
            if engine is None or st.tier is not Tier.GPU:
                raise NotLoaded(f"The model '{model_id}' is not loaded")
            yield engine

    # ------------------------------------------------------------------ placement

    def context_window(self, st: ModelState) -> int:
        """The per-slot context a client may plan against, the one number every route tells
        (/v1/models, the Codex and Anthropic model lists, Ollama's show and ps) and the
        prompt checks refuse past: the model's trained context when known (a larger num_ctx
        rebuilds up to it), else what the config funds per slot, narrowed to what this
        machine's memory can fund (`Residency.fundable_context`)."""
        return self.residency.fundable_context(st)

    def placement_of(self, st: ModelState) -> Placement:
        """Current placement, or what it would be with tier 1 empty when not resident."""
        if st.placement is not None:
            return st.placement
        planned = place(self.residency.request(st, None))
        if isinstance(planned, NoFit):
            return Placement(primary_tier=st.tier)
        planned = self.residency.with_device(st, planned)
        return Placement(**{**planned.__dict__, "primary_tier": st.tier,
                            "pinned_ram_bytes": st.pinned.bytes if st.pinned else 0,
                            "vram_weight_bytes": 0, "vram_kv_and_workspace_bytes": 0,
                            "gpu_layers": 0,
                            "ssd_layers": planned.gpu_layers + planned.pinned_ram_layers
                            if st.tier is Tier.SSD else 0,
                            "pinned_ram_layers": planned.gpu_layers + planned.pinned_ram_layers
                            if st.tier is Tier.RAM else 0})

    # ------------------------------------------------------------------ manual moves

    async def move(self, model_id: str, target: Tier, context_len: int | None = None,
                   *, allow_disabled: bool = False, wait_idle: bool = False) -> ModelState:
        """POST /v1/memory/tier, startup staging, keep_alive. `Busy` while leased (with
        ``wait_idle``: waits for its leases and holds to end instead), a load's refusals
        (`Scheduler.lease`) when it cannot load. Waits at the gates like a lease (a model
        being changed, or held by another model's swap), then blocks for as long as the
        load or unload takes: cancelling it then may leave the model's state half-changed
        (callers that cancel shield it; the wait before is cancel-safe)."""
        st = await self.idle(model_id, allow_disabled=allow_disabled) if wait_idle else \
            await self._settled(model_id, allow_disabled)
        if st.in_use:
            raise Busy(f"The model '{model_id}' is in use; retry when it is idle")
        # A move is a lease of its own: nothing evicts the model meanwhile.
        with self._counted(st, touch=False):
            if target is Tier.GPU:
                await self.residency.ensure(st, context_len)
            else:
                async with st.load_lock:
                    if st.tier is not target:
                        await self.residency.unload(st, target)
        return st

    async def _settled(self, model_id: str, allow_disabled: bool) -> ModelState:
        """The model's state once past its gates (`UnknownModel`, `DisabledModel`)."""
        await self._pass_gates(model_id)
        return self.get(model_id, enabled_only=not allow_disabled)

    async def idle(self, model_id: str, *, allow_disabled: bool = False) -> ModelState:
        """The model's state once nothing leases or holds it and no gate stands before it:
        at once when idle now, else when its last lease or hold ends (no polling; a model
        kept busy by new requests is waited for as long as that lasts). Cancel-safe;
        `UnknownModel` / `DisabledModel` when it is removed or switched off meanwhile."""
        st = await self._settled(model_id, allow_disabled)
        while st.in_use:
            await self.released.wait()
            st = await self._settled(model_id, allow_disabled)
        return st

    def keep(self, model_id: str, kept: bool) -> None:
        """Hold ``model_id`` in tier 1 against other models' loads (planned as
        realtime_pinned: a client's keep_alive), or stop holding it. Moves nothing; an
        unknown id is ignored (the model was removed)."""
        st = self.models.get(self.resolve(model_id))
        if st is not None:
            st.kept = kept

    def prefetch(self, model_id: str) -> None:
        """x-hypnos-next-model: load ``model_id`` in the background. Unknown, disabled, busy
        or failing models are ignored, and so is one behind a gate (being changed, or held
        by a swap that may just have evicted it); the current request never waits for
        this."""
        st = self.models.get(model_id)
        if st is None or not st.enabled or st.problem or st.tier is Tier.GPU or st.in_use \
                or self._gate(model_id) is not None:
            return

        async def load():
            try:
                await self.move(model_id, Tier.GPU)
            except Refused:
                pass
        self._background_task(load())

    def _background_task(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def shutdown(self) -> None:
        """Free every engine, then let the prompt cache finish its writes (up to 10 s) and
        stop its writer."""
        await self.residency.release_all()
        if self.prompt_cache is not None:
            await asyncio.to_thread(self.prompt_cache.close)
