"""Residency: moving models between the tiers (load into tier 1, demote to 2 or 3).

`Residency.ensure` is what a lease calls to make its model resident; it returns what it did
(a `LoadOutcome`: the tier left, the switch time, the evictions, the load's phases) and
writes nothing of the caller's. Reading top-down:

- ``ensure``: under the model's ``load_lock``, nothing to do when it is in tier 1 with a
  large enough context; a larger context drains the model's slots and rebuilds it; else
  ``_promote``.
- ``_promote``: the load runs as a shielded task (a client hanging up mid-load must not
  leave an engine built but unbooked) under ``place_lock``: one placement decision at a
  time, so two loads never book the same free bytes.
- ``_plan_or_wait``: asks the planner (`plan_load`). When the model does not fit beside
  busy models it groups the swap: new requests of those models wait at a gate (they queue
  behind this load) and it waits, up to limits.swap_wait_ms, on the scheduler's release
  `Wakeup` (a lease, hold or load ended) before planning again.
- ``_load_planned``: evicts the victims (``_evict`` -> ``_unload``), loads through
  `Effects`, restores parked KV state.

What is booked where, and what the planner is asked, is `Bookings` (bookings.py), which
`Residency` extends.

Threading: every method runs on the event loop; blocking effects run in worker threads.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace

from hypnos.engines.errors import EngineError, EngineUnavailable, WorkerLost
from hypnos.engines.llama.prompt_cache import PromptCache
from hypnos.engines.records import LoadReport
from hypnos.planner.budgets import tier2_keeps_engine
from hypnos.planner.loading import LoadPlan, NoRoom, TooBig
from hypnos.planner.process_memory import over_process_cap
from hypnos.planner.types import Budgets, Hardware, Placement, Priority, Tier
from hypnos.service.config.schema import Config
from hypnos.service.scheduling.bookings import Bookings
from hypnos.service.scheduling.effects import Effects
from hypnos.service.scheduling.swap_gates import SwapGates, gated
from hypnos.service.scheduling.kv_park import Parking
from hypnos.service.scheduling.lease import LoadOutcome
from hypnos.service.scheduling.pool import KeptEngine, ModelState
from hypnos.service.refusals import (LoadFailed, LoadRefused, NotServable, Refusal,
                                     WorkersBusy)
from hypnos.service.scheduling.rpc_workers import RpcWorkers
from hypnos.service.scheduling.wakeup import Wakeup


class Residency(Bookings):
    def __init__(self, *, config: Config, hardware: Hardware, budgets: Budgets,
                 accelerated: frozenset[str], effects: Effects, kv_park: Parking,
                 models: dict[str, ModelState], released: Wakeup,
                 rss: Callable[[], int], rpc: RpcWorkers | None = None,
                 prompt_cache: PromptCache | None = None):
        """``models`` is the scheduler's pool (shared, not copied); ``released`` the wake-up
        notified when a lease, hold or load ends; ``rss`` reads the process's resident
        memory (for the unbooked memory taken off tier 1 and the
        hardware.max_process_memory_bytes check); ``rpc``: the RPC workers a chat model too
        large for this machine may be split onto; ``prompt_cache``: the prompt cache, whose
        RAM tier is booked in tier 2 and gives way to a model's weights."""
        super().__init__(config=config, hardware=hardware, budgets=budgets,
                         accelerated=accelerated, kv_park=kv_park, models=models, rss=rss,
                         prompt_cache=prompt_cache)
        self.effects, self.released = effects, released
        self.rpc = rpc if rpc is not None else RpcWorkers(())
        self.recent_evictions: deque[dict] = deque(maxlen=32)
        self.place_lock = asyncio.Lock()
        # Busy models whose new requests wait for another model's swap (_plan_or_wait).
        self.swap_gates: dict[str, asyncio.Event] = {}

    # ------------------------------------------------------------------ making resident

    async def ensure(self, st: ModelState, context_len: int | None) -> LoadOutcome | None:
        """Make ``st`` resident in tier 1 with at least ``context_len`` per slot; what the
        promotion did, or None when it was resident already."""
        async with st.load_lock:
            if st.tier is Tier.GPU and st.lost:
                async with self._drained(st):   # a lost RPC worker: plan and load again
                    await self.unload(st, Tier.SSD)
            if st.tier is Tier.GPU and not self._needs_rebuild(st, context_len):
                return None
            if st.tier is Tier.GPU:   # a larger context: wait for running requests, rebuild
                async with self._drained(st):
                    return await self._rebuild(st, context_len)
            return await self._promote(st, context_len)

    async def _rebuild(self, st: ModelState, context_len: int | None) -> LoadOutcome:
        """Rebuild resident ``st`` for ``context_len``, carrying its slots' KV (tokens and
        partitions) into the new context whether or not KV parking is on, so a rebuild
        loses no cached prefix. Caller holds st.load_lock and every slot."""
        engine = st.engine
        carried = (await asyncio.to_thread(self.effects.park, st, engine)
                   if engine is not None else None)
        await self.unload(st, to=Tier.RAM if st.cfg.keep_warm_in_ram else Tier.SSD,
                          park=False)
        outcome = await self._promote(st, context_len)
        if carried is not None and st.engine is not None:
            tokens, ms = await asyncio.to_thread(self.effects.restore, st, st.engine, carried)
            if outcome.phases is not None:
                outcome.phases.kv_restored_tokens, outcome.phases.kv_restore_ms = tokens, ms
        return outcome

    @asynccontextmanager
    async def _drained(self, st: ModelState) -> AsyncIterator[None]:
        """Every execution slot of ``st`` taken for the block: the requests running on its
        engine have ended, and none starts before the block ends. Caller holds
        st.load_lock (a request holding a slot never waits for it)."""
        taken = 0
        try:
            for _ in range(st.cfg.slots):
                await st.slots.acquire()
                taken += 1
            yield
        finally:
            for _ in range(taken):
                st.slots.release()

    def _needs_rebuild(self, st: ModelState, context_len: int | None) -> bool:
        if not context_len or st.placement is None or st.shape.num_layers == 0:
            return False
        per_slot = st.placement.allocated_context_len // max(1, st.cfg.slots)
        return context_len > per_slot

    async def _promote(self, st: ModelState, per_slot: int | None) -> LoadOutcome:
        previous, started = st.tier, time.monotonic()
        # Shielded: a client that hangs up during a cold start must not leave an engine
        # built but unbooked. The load finishes and is booked; the caller sees its cancel.
        task = asyncio.ensure_future(self._load_locked(st, per_slot, started))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        evicted, report = await asyncio.shield(task)
        return LoadOutcome(previous, (time.monotonic() - started) * 1000, evicted, report)

    async def _load_locked(self, st: ModelState, per_slot: int | None, started: float
                           ) -> tuple[tuple[str, ...], LoadReport | None]:
        """The models evicted and the load's report (nothing: another request loaded it
        while this one waited)."""
        try:
            async with self.place_lock:
                if st.tier is Tier.GPU and st.engine is not None:
                    return (), None
                with gated(self.swap_gates) as gates:
                    plan = await self._plan_or_wait(st, per_slot, gates)
                    from_tier = st.tier
                    report = await self._load_planned(st, plan.placement, plan.evict)
        finally:
            self.released.notify()      # a load ended: plans waiting on it may now fit
        st.stats.load_ms[from_tier] = (time.monotonic() - started) * 1000
        return plan.evict, report

    async def _plan_or_wait(self, st: ModelState, per_slot: int | None,
                            gates: SwapGates) -> LoadPlan:
        """Plan ``st``'s load. When it does not fit beside busy models (`NoRoom`,
        `WorkersBusy`), group the swap: gate their new requests (``gates``; opened once this
        load is done) and wait up to limits.swap_wait_ms, woken each time a lease ends, for
        the requests they already admitted to finish. The requests of the resident model
        that were queued finish first, and the ones arriving later wait one swap instead of
        starving ``st``. Past the bound, or for a refusal no waiting cures: `LoadRefused`.
        Caller holds place_lock."""
        deadline = time.monotonic() + self.config.limits.swap_wait_ms / 1000
        while True:
            decision = await self._plan_any(st, per_slot)
            if isinstance(decision, LoadPlan):
                # In the same step as the plan: no request can lease a victim before its
                # eviction.
                gates.close(decision.evict)
                return decision
            if isinstance(decision, (NoRoom, WorkersBusy)):
                busy = [m.id for m in self.models.values()
                        if m is not st and m.tier is Tier.GPU and m.in_use]
                if busy and time.monotonic() < deadline:
                    gates.close(busy)
                    await self.released.wait(timeout=deadline - time.monotonic())
                    continue
            raise LoadRefused(st.id, decision)

    async def _plan_any(self, st: ModelState, per_slot: int | None) -> LoadPlan | Refusal:
        """`plan`, and when the model does not fit this machine alone (`TooBig`), `plan`
        again with the RPC workers that answer a probe now. `WorkersBusy` when models in use
        hold the workers it needs; `NotServable` naming the workers that do not answer when
        the model does not fit without them, or when this build cannot reach them."""
        decision = self.plan(st, per_slot)
        if not isinstance(decision, TooBig) or \
                not (self.rpc and st.cfg.engine == "ggml_llama" and st.shape.num_layers):
            return decision
        from hypnos.engines.devices import llama_has_rpc
        if not llama_has_rpc():
            raise NotServable(
                f"The model '{st.id}' does not fit this machine alone, and this "
                "llama-cpp-python build has no RPC backend to reach the RPC workers with "
                "(./run.sh installs one built with GGML_RPC=ON)")
        await self.rpc.refresh(self.models.values())
        # A worker serves one model: idle split models may be evicted for their workers.
        lend = [m.id for m in self.models.values() if m is not st and m.placement is not None
                and m.tier is Tier.GPU and m.placement.remote and not m.in_use
                and m.priority is not Priority.REALTIME_PINNED]
        split = self.plan(st, per_slot, self.rpc.budgets(self.models.values(), lend))
        if isinstance(split, LoadPlan):
            first = self.rpc.holders(split.placement, self.models.values())
            return replace(split, evict=(*first, *(m for m in split.evict if m not in first)))
        if not isinstance(split, TooBig):
            return split
        down = self.rpc.down()
        busy = sorted({m.id for m in self.rpc.users(self.models.values()).values()
                       if m is not st and m.id not in lend})
        if busy and not down:       # _plan_or_wait waits for their leases to end
            return WorkersBusy(tuple(busy))
        if not down:
            return split
        names = "; ".join(f"{e} ({why})" for e, why in down.items())
        raise NotServable(
            f"The model '{st.id}' does not fit this machine alone and the RPC workers "
            f"that answer cannot hold the rest; not answering: {names}", retry_after_s=5)

    async def drop_lost(self, st: ModelState) -> None:
        """Demote ``st`` when its engine lost an RPC worker (`SplitChatEngine.lost`), once the
        requests running on it have ended (they fail fast on a lost engine): the next request
        plans and loads it again, with the workers that answer then."""
        async with st.load_lock, self._drained(st):    # not under a request still running
            lost = st.lost
            if st.tier is not Tier.GPU or not lost:
                return
            to = await self.unload(st, Tier.RAM if st.cfg.keep_warm_in_ram else Tier.SSD)
        self.recent_evictions.append({
            "model": st.id, "for_model": None, "reason": "rpc_worker_lost",
            "detail": lost, "to_tier": str(to), "unix_ms": int(time.time() * 1000)})

    async def _load_planned(self, st: ModelState, placement: Placement,
                            evict: Sequence[str]) -> LoadReport:
        for victim in evict:
            await self.evict(self.models[victim], for_model=st.id, reason="memory_budget")
        kept = st.pinned.take() if isinstance(st.pinned, KeptEngine) else None
        try:
            with self.rpc.reserved(placement):
                loaded = await asyncio.to_thread(self.effects.load, st, placement, kept)
        except BaseException as exc:
            if kept is not None:        # a failed load frees the kept weights too
                st.pinned = None
            if not isinstance(exc, EngineError):
                raise
            if isinstance(exc, EngineUnavailable):
                st.problem = str(exc)
            elif not isinstance(exc, WorkerLost):   # a worker gone: the next try may work
                self.effects.count_load_failure(st)
            raise LoadFailed(st.id, exc) from None
        st.engine, st.booked_vs_real, report = loaded.engine, loaded.memory_truth, loaded.report
        await self._unpin(st)       # the kept engine's emptied holder, or the pinned files
        parked = self.kv_park.take(st.id)
        if parked is not None:
            tokens, ms = await asyncio.to_thread(self.effects.restore, st, loaded.engine, parked)
            report.kv_restored_tokens, report.kv_restore_ms = tokens, ms
        st.placement, st.tier, st.last_load = self.honest(st, placement), Tier.GPU, report
        return report

    # ------------------------------------------------------------------ demoting

    async def evict(self, victim: ModelState, *, for_model: str, reason: str) -> None:
        """Demote ``victim`` to where it rests (tier 2 when keep_warm_in_ram) for another
        model, and record it in ``recent_evictions``."""
        to = Tier.RAM if victim.cfg.keep_warm_in_ram else Tier.SSD
        async with victim.load_lock:
            to = await self.unload(victim, to, room_for=for_model)
        self.recent_evictions.append({
            "model": victim.id, "for_model": for_model, "reason": reason,
            "to_tier": str(to), "unix_ms": int(time.time() * 1000)})
        self.effects.count_eviction(victim)

    def _keeps_engine(self, st: ModelState, room_for: str | None) -> bool:
        """Tier 2 of ``st`` is its engine kept without a context (the weights stay loaded):
        a chat model, on a host whose engines compute from host memory, with room in the
        tier-2 budget for its weights."""
        return (st.cfg.modality == "text_generation" and st.pinned is None
                and tier2_keeps_engine(self.hardware.topology)
                and self._tier2_fits(st.weight_bytes, room_for))

    async def unload(self, st: ModelState, to: Tier, room_for: str | None = None,
                     park: bool = True) -> Tier:
        """Demote ``st`` from tier 1 (or 2) to ``to``; returns where it really went (tier 2
        falls back to 3 when the tier-2 budget is full, or when pinning the files would take
        the measured footprint past hardware.max_process_memory_bytes). A chat model on a
        host computing from host memory keeps its engine in tier 2 (``Effects.suspend``:
        weights loaded, context freed); otherwise tier 2 pins its files. ``room_for``: the
        model this demotion makes room for (its tier-2 bytes are not counted against tier 2's
        budget: its placement books them in tier 1). ``park``: False when the caller keeps
        the engine's KV itself (a rebuild). Caller holds st.load_lock."""
        if st.engine is not None:
            if park and self.kv_park.enabled and st.enabled:
                self.kv_park.put(st.id, await asyncio.to_thread(self.effects.park, st, st.engine))
            if to is Tier.RAM and self._keeps_engine(st, room_for):
                kept = await asyncio.to_thread(self.effects.suspend, st, st.engine)
                if kept is not None:
                    st.engine, st.pinned = None, kept
            await self._free_engine(st)
        if to is Tier.RAM and st.pinned is None:
            if over_process_cap(self.rss(), st.weight_bytes,
                                self.config.hardware.max_process_memory_bytes) or \
                    not self._tier2_fits(st.weight_bytes, room_for):
                to = Tier.SSD
            else:
                st.pinned = await asyncio.to_thread(self.effects.pin, st)
        if to is Tier.SSD:
            await self._unpin(st)
            await asyncio.to_thread(self.effects.drop_pages, st)
        st.tier = to
        st.placement = None if to is not Tier.GPU else st.placement
        self.released.notify()          # an unload ended
        return to

    async def _free_engine(self, st: ModelState) -> None:
        """Unload ``st``'s engine, if any (it is gone from the record at once)."""
        engine, st.engine = st.engine, None
        if engine is not None:
            await asyncio.to_thread(self.effects.unload, st, engine)

    async def _unpin(self, st: ModelState) -> None:
        """Release what tier 2 holds for ``st``, if anything (gone from the record at once)."""
        pinned, st.pinned = st.pinned, None
        if pinned is not None:
            await asyncio.to_thread(self.effects.unpin, st, pinned)

    async def release_all(self) -> None:
        """Shutdown: free every engine and everything tier 2 holds."""
        for st in self.models.values():
            await self._free_engine(st)
            await self._unpin(st)
