"""How long an idle model keeps its tier: Ollama's per-request ``keep_alive`` and the
per-model ``idle_demote_secs`` / ``idle_evict_secs`` of its config.

``keep_alive`` ``0`` demotes the model to tier 2 as soon as the answer is out; a duration
arms a timer that demotes it when it has been idle that long (a later request re-arms it); a
model still leased when its timer fires is left alone and tried again one period later.
The config's idle times are applied by ``sweep`` (every few seconds, `run`): tier 1 → 2
after ``idle_demote_secs`` idle, tier 1 or 2 → 3 after ``idle_evict_secs``. Models with
neither follow the server's own tier policy. Runs on the event loop; ``close`` cancels the
timers and the sweep (app stop)."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

from hypnos.planner.types import Tier
from hypnos.service.http import errors

log = logging.getLogger(__name__)


SWEEP_SECS = 5.0


def idle_target(tier: Tier, idle_secs: float, demote_secs: float,
                evict_secs: float) -> Tier | None:
    """Where an idle model goes now under its config's idle times (None: it stays)."""
    if evict_secs > 0 and idle_secs >= evict_secs and tier in (Tier.GPU, Tier.RAM):
        return Tier.SSD
    if demote_secs > 0 and idle_secs >= demote_secs and tier is Tier.GPU:
        return Tier.RAM
    return None


class KeepAlive:
    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.deadlines: dict[str, float] = {}        # model id -> wall-clock demotion time
        self.timers: dict[str, asyncio.Task] = {}
        self.sweeper: asyncio.Task | None = None

    async def after_request(self, model_id: str, secs: float) -> None:
        """The answer for ``model_id`` is out and its request asked for ``secs``."""
        old = self.timers.pop(model_id, None)
        if old is not None:
            old.cancel()
        if secs <= 0:
            self.deadlines.pop(model_id, None)
            await self._demote(model_id)
            return
        self.deadlines[model_id] = time.time() + secs
        self.timers[model_id] = asyncio.ensure_future(self._later(model_id, secs))

    async def _later(self, model_id: str, secs: float) -> None:
        await asyncio.sleep(secs)
        self.timers.pop(model_id, None)
        if not await self._demote(model_id):
            self.timers[model_id] = asyncio.ensure_future(self._later(model_id, secs))
            return
        self.deadlines.pop(model_id, None)

    async def _demote(self, model_id: str, target: Tier = Tier.RAM) -> bool:
        """Tier 1 → ``target`` when idle; False when it was busy (try again later)."""
        try:
            st = self.scheduler.get(model_id)
            if st.tier is Tier.GPU or (target is Tier.SSD and st.tier is Tier.RAM):
                await self.scheduler.move(model_id, target)
        except errors.ModelBusy:
            return False
        except errors.HypnosError as exc:
            log.warning("could not move idle %s to %s: %s", model_id, target, exc.message)
        return True

    async def sweep(self) -> None:
        """Apply every model's idle_demote_secs / idle_evict_secs once."""
        for st in list(self.scheduler.models.values()):
            if st.in_use or not st.enabled:
                continue
            target = idle_target(st.tier, st.idle_seconds(), st.cfg.idle_demote_secs,
                                 st.cfg.idle_evict_secs)
            if target is not None:
                await self._demote(st.id, target)

    def start(self, every: float = SWEEP_SECS) -> None:
        """Start the sweep (once; `hypnos serve` does, for models added later too)."""
        if self.sweeper is not None and not self.sweeper.done():
            return

        async def run() -> None:
            while True:
                await asyncio.sleep(every)
                await self.sweep()
        self.sweeper = asyncio.ensure_future(run())

    def expires_at(self, model_id: str) -> str | None:
        """When the model leaves tier 1 (ISO 8601), or None when no keep_alive set it."""
        at = self.deadlines.get(model_id)
        if at is None:
            return None
        return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")

    def close(self) -> None:
        for task in self.timers.values():
            task.cancel()
        self.timers.clear()
        if self.sweeper is not None:
            self.sweeper.cancel()
