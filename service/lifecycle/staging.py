"""Start-up staging: the models with an ``initial_tier`` are moved there in the background once
the port is open (``/ready`` answers 503 until then, spec section 3). Before that, each enabled
model's engine is prepared (``Effects.prepare``: docling's imports), so that a model left on
disk does not do that work on its first request, while other requests wait on the GIL. Not
after /ready: run beside requests, a browser test's first embeddings request got no answer
(CI; a load importing the same libraries beside it is the likely cause)."""
from __future__ import annotations

import asyncio
import logging
import time

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


async def _prepare_engines(sched: Scheduler) -> None:
    """``Effects.prepare`` in a worker thread for each engine kind an enabled model uses, one
    after the other (two threads importing one library at once can see it half imported). A
    failure is logged; the model's load reports its cause."""
    done: set[tuple[str, str]] = set()
    for st in list(sched.models.values()):
        kind = (st.cfg.engine, st.cfg.modality)
        if not st.enabled or st.problem or kind in done:
            continue
        done.add(kind)
        t0 = time.monotonic()
        try:
            if await asyncio.to_thread(sched.effects.prepare, st):
                log.info("prepared the %s engine in %.1f s", st.cfg.engine,
                         time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - staging goes on; the load will say why
            log.warning("could not prepare the %s engine: %s", st.cfg.engine, exc)


async def stage_models(app: Sanic) -> None:
    """Run ``before_stage``, prepare the engines, then move each model with an initial tier
    there, in config order. A model that fails is reported and left cold; staging goes on
    with the rest."""
    sched: Scheduler = state(app).scheduler
    try:
        before_stage = state(app).before_stage
        if before_stage is not None:
            await asyncio.to_thread(before_stage)
            for st in list(sched.models.values()):   # files may have arrived
                if st.problem:
                    sched.add(build_state(state(app).config, st.cfg))
        await _report_rpc_workers(sched)
        await _prepare_engines(sched)
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
