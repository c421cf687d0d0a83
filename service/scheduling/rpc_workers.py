"""The RPC workers of ``[[hardware.rpc_workers]]`` as the scheduler sees them: what each offers
the planner, what the resident models book on it, whether it answers.

A worker serves one client at a time (llama.cpp's rpc-server), so a worker holding a resident
split model is not probed (a probe would wait behind the engine) and offers nothing to other
models; whether it answers is then whether that engine's process lives. Probes run in worker
threads (`rpc_probe.probe` blocks up to its timeout).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hypnos.planner.types import MIB, Placement, Tier
from hypnos.planner.workers import WorkerBudget
from hypnos.service.config.schema import RpcWorkerConfig
from hypnos.service.scheduling.pool import ModelState
from hypnos.engines.llama.rpc_probe import WorkerReport, probe

# Left to the worker's own process when its memory is read from the worker.
WORKER_RESERVE_BYTES = 512 * MIB
PROBE_TIMEOUT_S = 2.0
# /v1/memory/status reuses a probe this recent (the playground polls it every second).
STATUS_PROBE_AGE_S = 5.0


@dataclass
class WorkerState:
    cfg: RpcWorkerConfig
    report: WorkerReport | None = None       # the last probe (None: never probed)
    probed_unix_ms: int = 0
    # False once a model held it since the probe: the report is from before (re-probe).
    current: bool = False


class RpcWorkers:
    def __init__(self, workers: Iterable[RpcWorkerConfig]):
        self.workers = {w.endpoint: WorkerState(w) for w in workers}
        # Endpoints a load in progress is connecting to: not probed (a probe would wait
        # behind the engine and read as "no answer").
        self.loading: set[str] = set()

    @contextmanager
    def reserved(self, placement: Placement) -> Iterator[None]:
        """Keep probes off ``placement``'s workers while it loads."""
        endpoints = {share.endpoint for share in placement.remote}
        for e in endpoints & set(self.workers):
            self.workers[e].current = False      # what a probe said before the model took it
        self.loading |= endpoints
        try:
            yield
        finally:
            self.loading -= endpoints

    def __bool__(self) -> bool:
        return bool(self.workers)

    @staticmethod
    def users(models: Iterable[ModelState]) -> dict[str, ModelState]:
        """Endpoint -> the resident model whose placement holds layers on it."""
        out = {}
        for m in models:
            if m.tier is Tier.GPU and m.placement is not None:
                for share in m.placement.remote:
                    out[share.endpoint] = m
        return out

    async def refresh(self, models: Iterable[ModelState], max_age_s: float = 0.0) -> None:
        """Probe every worker no resident model holds and no load is connecting to (in
        threads, all at once), unless its last probe is younger than ``max_age_s``."""
        busy = self.users(models)
        oldest = int((time.time() - max_age_s) * 1000)
        idle = [w for e, w in self.workers.items() if e not in busy and e not in self.loading
                and (not max_age_s or not w.current or w.probed_unix_ms < oldest)]
        reports = await asyncio.gather(*(asyncio.to_thread(probe, w.cfg.endpoint,
                                                           PROBE_TIMEOUT_S) for w in idle))
        now = int(time.time() * 1000)
        for w, report in zip(idle, reports, strict=True):
            w.report, w.probed_unix_ms, w.current = report, now, True

    def offer(self, w: WorkerState) -> int:
        """Bytes the planner may book on an idle worker that answered."""
        if w.report is None or not w.report.answers:
            return 0
        reported = max(0, w.report.free_bytes - WORKER_RESERVE_BYTES)
        return min(w.cfg.memory_bytes, w.report.free_bytes) if w.cfg.memory_bytes else reported

    def budgets(self, models: Iterable[ModelState],
                lend: Iterable[str] = ()) -> list[WorkerBudget]:
        """What the planner may place into now: the idle workers that answered, and those
        held by the models in ``lend`` (ids of models that would be evicted for them)."""
        lent = set(lend)
        busy = {e: m for e, m in self.users(models).items() if m.id not in lent}
        return [WorkerBudget(e, self.offer(w), w.cfg.bandwidth_bytes_per_s)
                for e, w in self.workers.items()
                if e not in busy and w.report is not None and w.report.answers]

    def holders(self, placement: Placement, models: Iterable[ModelState]) -> list[str]:
        """Ids of the resident models holding workers ``placement`` uses."""
        users = self.users(models)
        return list(dict.fromkeys(users[s.endpoint].id for s in placement.remote
                                  if s.endpoint in users))

    def down(self) -> dict[str, str]:
        """Endpoint -> why, for the workers whose last probe got no answer."""
        return {e: w.report.error for e, w in self.workers.items()
                if w.report is not None and not w.report.answers}

    def status(self, models: Iterable[ModelState]) -> list[dict]:
        """/v1/memory/status ``rpc_workers``: each worker's budget, bookings and health."""
        busy = self.users(models)
        out = []
        for e, w in self.workers.items():
            user = busy.get(e)
            share = next((s for s in user.placement.remote if s.endpoint == e), None) \
                if user is not None and user.placement is not None else None
            report = w.report
            entry = {
                "endpoint": e,
                "bandwidth_bytes_per_s": w.cfg.bandwidth_bytes_per_s,
                "configured_memory_bytes": w.cfg.memory_bytes,
                "booked_bytes": share.bytes if share else 0,
                "model": user.id if user else None,
                "layers": share.layers if share else 0,
            }
            if user is not None:
                lost = user.lost
                entry["answers"] = not lost
                entry["checked"] = "engine"      # the engine's connection is the probe
                if lost:
                    entry["error"] = lost
            else:
                entry["answers"] = report.answers if report is not None else None
                entry["checked"] = "probe" if report is not None else "never"
                if report is not None and not report.answers:
                    entry["error"] = report.error
            if report is not None and report.answers:
                entry["reported_free_bytes"] = report.free_bytes
                entry["reported_total_bytes"] = report.total_bytes
                entry["protocol"] = report.version
                entry["probed_unix_ms"] = w.probed_unix_ms
            budget = self.offer(w)        # a busy worker: from its probe before the load
            entry["budget_bytes"] = budget
            entry["free_bytes"] = max(0, budget - entry["booked_bytes"]) if budget else 0
            out.append(entry)
        return out
