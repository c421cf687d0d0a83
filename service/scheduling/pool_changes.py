"""Changes to the model pool while the server runs (spec section 6): replace or remove a
model (PUT / DELETE /v1/models/{id}), enable / disable it, change its MoE offload.

`PoolChanges` is a collaborator the scheduler holds (``scheduler.pool``: the routes and the
config watch call it there); it unloads only through the scheduler's `Residency`, and waits
for a drain on the scheduler's release `Wakeup` (notified each time a lease or hold ends).

Threading: every method runs on the event loop and blocks (awaits) for as long as the drain
or the unload takes.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import replace

from hypnos.planner.types import MoeOffload, Tier
from hypnos.service.scheduling.kv_park import Parking
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.refusals import Busy
from hypnos.service.scheduling.residency import Residency
from hypnos.service.scheduling.wakeup import Wakeup


class PoolChanges:
    def __init__(self, *, models: dict[str, ModelState], get: Callable[..., ModelState],
                 residency: Residency, kv_park: Parking, released: Wakeup):
        """``models``: the scheduler's pool (shared); ``get``: the scheduler's lookup
        (`UnknownModel`); ``residency`` unloads; ``released`` wakes a drain when a lease or
        hold ends."""
        self.models, self.get, self.residency = models, get, residency
        self.kv_park, self.released = kv_park, released
        # Models being replaced or removed: new leases wait on the event (spec section 6).
        self._changes: dict[str, asyncio.Event] = {}

    def gate(self, model_id: str) -> asyncio.Event | None:
        """The event new leases of ``model_id`` wait on while it changes (None: no change)."""
        return self._changes.get(model_id)

    def is_changing(self, model_id: str) -> bool:
        """A PUT / DELETE of this model is checking or draining (new requests wait)."""
        return model_id in self._changes

    @asynccontextmanager
    async def changing(self, model_id: str):
        """Gate new leases of ``model_id`` while a PUT / DELETE checks and applies its change:
        requests arriving meanwhile wait, then go to the replacement (`UnknownModel` once
        removed). `UnknownModel` for an unknown id, `Busy` while another change to it runs."""
        self.get(model_id, enabled_only=False)
        if model_id in self._changes:
            raise Busy(f"The model '{model_id}' is already being changed; retry when that "
                       "change is done")
        gate = self._changes[model_id] = asyncio.Event()
        try:
            yield
        finally:
            del self._changes[model_id]
            gate.set()

    async def drain_and_install(self, model_id: str, new: ModelState | None,
                                drain_secs: float) -> None:
        """Wait up to ``drain_secs`` for the running requests of ``model_id`` to finish,
        unload it, then install ``new`` under the same id (None: remove it). Past
        ``drain_secs`` nothing changes and this raises `Busy`. Caller holds
        `changing(model_id)`."""
        old = self.get(model_id, enabled_only=False)
        deadline = time.monotonic() + drain_secs
        while old.in_use and time.monotonic() < deadline:
            await self.released.wait(timeout=deadline - time.monotonic())
        if old.in_use:
            raise Busy(f"The model '{model_id}' still has {old.leases + old.holds} requests "
                       f"after drain_secs ({drain_secs:g} s); nothing was changed")
        old.enabled = False          # nothing to park: its conversations end here
        async with old.load_lock:
            await self.residency.unload(old, Tier.SSD)
        self.kv_park.take(model_id)
        if new is None:
            del self.models[model_id]
        else:
            self.models[model_id] = new

    async def swap(self, model_id: str, new: ModelState | None, drain_secs: float) -> None:
        """`changing` and `drain_and_install` in one (a change already checked)."""
        async with self.changing(model_id):
            await self.drain_and_install(model_id, new, drain_secs)

    async def set_enabled(self, model_id: str, enabled: bool) -> ModelState:
        """POST /v1/models/{id}/enable|disable. Disabling evicts the model to disk and drops
        its parked KV state; `Busy` while it is leased."""
        st = self.get(model_id, enabled_only=False)
        if not enabled and st.enabled:
            if st.in_use:
                raise Busy(f"The model '{model_id}' is in use; retry when idle")
            st.enabled = False
            async with st.load_lock:
                await self.residency.unload(st, Tier.SSD)
            self.kv_park.take(model_id)
        st.enabled = enabled
        return st

    async def set_moe_offload(self, model_id: str, mode: MoeOffload) -> str:
        """POST /v1/models/{id}/moe-offload: "now" when the model was idle or not loaded (an
        idle resident model is unloaded, its next request loads it with the new placement),
        "next_load" when it is busy."""
        st = self.get(model_id, enabled_only=False)
        st.cfg = replace(st.cfg, moe_offload=mode)   # this model's; the loaded config's stays
        if st.in_use:
            return "next_load"
        if st.tier is Tier.GPU:
            async with st.load_lock:
                await self.residency.unload(st, Tier.RAM if st.cfg.keep_warm_in_ram else Tier.SSD)
        return "now"
