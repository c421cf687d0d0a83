"""Start-up staging: the models with an ``initial_tier`` are moved there in the background once
the port is open (``/ready`` answers 503 until then, spec section 3)."""
from __future__ import annotations

import asyncio
import logging

from sanic import Sanic

from hypnos.planner.types import Tier
from hypnos.service.scheduling.build import build_state
from hypnos.service.scheduling.scheduler import Scheduler

log = logging.getLogger("hypnos.app")


async def stage_models(app: Sanic) -> None:
    """Run ``before_stage``, then move each model with an initial tier there, in config
    order. A model that fails is reported and left cold; staging goes on with the rest."""
    sched: Scheduler = app.ctx.scheduler
    try:
        if app.ctx.before_stage is not None:
            await asyncio.to_thread(app.ctx.before_stage)
            for st in list(sched.models.values()):   # files may have arrived
                if st.problem:
                    sched.models[st.id] = build_state(app.ctx.config, st.cfg)
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
        app.ctx.ready = not app.ctx.draining
