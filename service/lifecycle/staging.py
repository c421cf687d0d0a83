"""Start-up staging: the models with an ``initial_tier`` are moved there in the background once
the port is open (``/ready`` answers 503 until then, spec section 3)."""
from __future__ import annotations

import asyncio
import logging

from sanic import Sanic

from hypnos.planner.types import Tier
from hypnos.service.scheduling.build import build_state
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.state import state

log = logging.getLogger("hypnos.app")


async def _report_rpc_workers(sched: Scheduler) -> None:
    """One line per RPC worker at start-up: what it reports, or why it does not answer (a
    model that needs it then answers 503 naming it until it does)."""
    if not sched.rpc_workers:
        return
    await sched.rpc_workers.refresh(sched.models.values())
    for endpoint, w in sched.rpc_workers.workers.items():
        report = w.report
        if report is not None and report.answers:
            log.info("RPC worker %s answers: protocol %s, %d MiB free of %d", endpoint,
                     report.version, report.free_bytes >> 20, report.total_bytes >> 20)
        else:
            log.warning("RPC worker %s does not answer: %s", endpoint,
                        report.error if report else "not probed")


async def stage_models(app: Sanic) -> None:
    """Run ``before_stage``, then move each model with an initial tier there, in config
    order. A model that fails is reported and left cold; staging goes on with the rest."""
    sched: Scheduler = state(app).scheduler
    try:
        before_stage = state(app).before_stage
        if before_stage is not None:
            await asyncio.to_thread(before_stage)
            for st in list(sched.models.values()):   # files may have arrived
                if st.problem:
                    sched.add(build_state(state(app).config, st.cfg))
        await _report_rpc_workers(sched)
        for st in list(sched.models.values()):
            target = st.cfg.initial_tier
            if target is Tier.SSD or not st.enabled or st.problem:
                continue
            try:
                await sched.move(st.id, target)
                log.info("staged %s in %s", st.id, target)
            except Exception as exc:  # noqa: BLE001 - one failing model must not stop the rest
                log.warning("could not stage %s in %s: %s", st.id, target, exc)
    finally:
        state(app).lifecycle.staged()       # READY, unless a drain began meanwhile
