"""How long an idle model keeps its tier: Ollama's per-request ``keep_alive`` and the
per-model ``idle_demote_secs`` / ``idle_evict_secs`` of its config.

``keep_alive`` (seconds, as `wire.ollama.keep_alive_secs` parses it), applied by
`KeepAlive.after_request` once the answer is out, for the model's resolved id (an alias
names its model): ``0`` demotes the model to tier 2; a duration holds it in tier 1 against
other models' loads (`Scheduler.keep`) until it runs out, then demotes it; a negative value
holds it until a later keep_alive says otherwise. Each keep_alive replaces the model's
previous one (its timer, or a demotion still waiting). A demotion waits for the model's
leases to end (it never fails for a busy model); a refusal other than the model being gone
is logged and tried again `RETRY_SECS` later.

The config's idle times are applied by ``sweep`` (every few seconds, `start`): tier 1 → 2
after ``idle_demote_secs`` idle, tier 1 or 2 → 3 after ``idle_evict_secs``, skipping models a
keep_alive governs. Models with neither follow the server's own tier policy. A sweep that
fails is logged and the next one runs. Everything runs on the event loop; ``close`` cancels
the timers and the sweep (app stop).
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import UTC, datetime, timedelta

from hypnos.planner.types import Tier
from hypnos.service.refusals import Busy, DisabledModel, Refused, UnknownModel

log = logging.getLogger(__name__)


SWEEP_SECS = 5.0
RETRY_SECS = 30.0
# What Ollama reports as the expiry of a model kept loaded: now plus Go's largest duration
# (about 292 years, so a year near 2318).
FOREVER = timedelta(microseconds=(2**63 - 1) // 1000)
GONE = (UnknownModel, DisabledModel)        # nothing left to demote (removal, disable unload)


def idle_target(tier: Tier, idle_secs: float, demote_secs: float,
                evict_secs: float) -> Tier | None:
    """Where an idle model goes now under its config's idle times (None: it stays)."""
    if evict_secs > 0 and idle_secs >= evict_secs and tier in (Tier.GPU, Tier.RAM):
        return Tier.SSD
    if demote_secs > 0 and idle_secs >= demote_secs and tier is Tier.GPU:
        return Tier.RAM
    return None


def _above(tier: Tier, target: Tier) -> bool:
    """Whether a model in ``tier`` has somewhere to go down to ``target``."""
    if tier is Tier.GPU:
        return target is not Tier.GPU
    return tier is Tier.RAM and target is Tier.SSD


class KeepAlive:
    def __init__(self, scheduler, retry_secs: float = RETRY_SECS):
        self.scheduler = scheduler
        self.retry_secs = retry_secs
        # Resolved model id -> wall-clock time its keep_alive runs out (math.inf: kept).
        self.deadlines: dict[str, float] = {}
        # Resolved model id -> its keep_alive's task (a timer, or a demotion waiting).
        self.tasks: dict[str, asyncio.Task] = {}
        self.sweeper: asyncio.Task | None = None

    def after_request(self, name: str, secs: float | None) -> None:
        """The answer of a request for model ``name`` (an id or an alias) is out and it asked
        for keep_alive ``secs`` (None: it did not; nothing changes). Returns at once: any
        demotion runs in the background."""
        if secs is None:
            return
        model_id = self.scheduler.resolve(name)
        task = self.tasks.pop(model_id, None)
        if task is not None:
            task.cancel()                       # the previous keep_alive is replaced
        self.scheduler.keep(model_id, secs != 0)
        if secs < 0:
            self.deadlines[model_id] = math.inf
            return
        if secs == 0:
            self.deadlines.pop(model_id, None)
        else:
            self.deadlines[model_id] = time.time() + secs
        self.tasks[model_id] = asyncio.ensure_future(self._expire(model_id, secs))

    async def settled(self, name: str) -> None:
        """Wait for the demotion (or timer) ``name``'s keep_alive started to finish; the
        caller being cancelled leaves it running."""
        task = self.tasks.get(self.scheduler.resolve(name))
        if task is not None:
            await asyncio.shield(task)

    async def _expire(self, model_id: str, secs: float) -> None:
        """After ``secs``: release the hold and demote the model to tier 2 once idle,
        retrying after refusals until it is there or gone."""
        try:
            await asyncio.sleep(secs)
            self.scheduler.keep(model_id, False)
            while True:
                try:
                    await self._demote(model_id, Tier.RAM)
                    break
                except GONE:
                    break
                except Refused as exc:
                    log.warning("keep_alive could not demote %s (%s); trying again in %.0f s",
                                model_id, exc.message, self.retry_secs)
                await asyncio.sleep(self.retry_secs)
        except Exception:
            log.exception("keep_alive of %s failed; the model keeps its tier", model_id)
        finally:
            if self.tasks.get(model_id) is asyncio.current_task():
                del self.tasks[model_id]
                self.deadlines.pop(model_id, None)

    async def _demote(self, model_id: str, target: Tier) -> None:
        """Move ``model_id`` down to ``target`` once nothing leases it (nothing when it is
        there or lower already). Cancel-safe: a cancel during the move lets the move end."""
        while True:
            st = await self.scheduler.idle(model_id)
            if not _above(st.tier, target):
                return
            move = asyncio.ensure_future(self.scheduler.move(model_id, target))
            move.add_done_callback(_observed)
            try:
                await asyncio.shield(move)
                return
            except Busy:
                continue            # a lease came in while it waited at a gate: wait again

    async def sweep(self) -> None:
        """Apply every model's idle_demote_secs / idle_evict_secs once; a model in use, or
        whose keep_alive governs it, is left for a later sweep. Never raises for one model."""
        for st in list(self.scheduler.models.values()):
            if st.in_use or not st.enabled or st.kept or st.id in self.tasks:
                continue
            target = idle_target(st.tier, st.idle_seconds(), st.cfg.idle_demote_secs,
                                 st.cfg.idle_evict_secs)
            if target is None:
                continue
            try:
                await self.scheduler.move(st.id, target)
            except Refused as exc:          # busy again, removed, ...: the next sweep sees
                log.info("idle sweep left %s where it is: %s", st.id, exc.message)
            except Exception:
                log.exception("idle sweep could not move %s to %s", st.id, target)

    def start(self, every: float = SWEEP_SECS) -> None:
        """Start the sweep (once; `hypnos serve` does, for models added later too). It runs
        until `close`, whatever one sweep raises."""
        if self.sweeper is not None and not self.sweeper.done():
            return

        async def run() -> None:
            while True:
                await asyncio.sleep(every)
                try:
                    await self.sweep()
                except Exception:
                    log.exception("idle sweep failed; the next runs in %.0f s", every)
        self.sweeper = asyncio.ensure_future(run())

    def expires_at(self, model_id: str) -> str | None:
        """When the model may leave tier 1 (ISO 8601, UTC), now plus `FOREVER` while kept
        loaded, or None when no keep_alive governs it. Never raises."""
        at = self.deadlines.get(model_id)
        if at is None:
            return None
        try:
            when = datetime.now(UTC) + FOREVER if math.isinf(at) else \
                datetime.fromtimestamp(at, UTC)
        except (OverflowError, ValueError, OSError):
            return None
        return when.isoformat().replace("+00:00", "Z")

    def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()
        if self.sweeper is not None:
            self.sweeper.cancel()


def _observed(task: asyncio.Task) -> None:
    """Retrieve a shielded move's outcome so a cancelled waiter leaves no 'never retrieved'
    warning (its refusal is the waiter's to report, when one still waits)."""
    if not task.cancelled():
        task.exception()
