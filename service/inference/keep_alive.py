"""Ollama's ``keep_alive``: per model, how long it stays in tier 1 after its last request.

``0`` demotes the model to tier 2 as soon as the answer is out; a duration arms a timer
that demotes it when it has been idle that long (a later request re-arms it); a model still
leased when its timer fires is left alone and tried again one period later. Models no
request sent a keep_alive for follow the server's own tier policy. Runs on the event loop;
``close`` cancels the timers (app stop)."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

from hypnos.planner.types import Tier
from hypnos.service.http import errors

log = logging.getLogger(__name__)


class KeepAlive:
    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.deadlines: dict[str, float] = {}        # model id -> wall-clock demotion time
        self.timers: dict[str, asyncio.Task] = {}

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

    async def _demote(self, model_id: str) -> bool:
        """Tier 1 → tier 2 when idle; False when it was busy (try again later)."""
        try:
            st = self.scheduler.get(model_id)
            if st.tier is Tier.GPU:
                await self.scheduler.move(model_id, Tier.RAM)
        except errors.ModelBusy:
            return False
        except errors.HypnosError as exc:
            log.warning("keep_alive could not demote %s: %s", model_id, exc.message)
        return True

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
