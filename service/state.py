"""`AppState`: everything one server holds, built whole by `app.create_app` and passed to
Sanic as the app's context, so ``app.ctx`` *is* this object (slots: no attribute can be added
later). Code reads it through `state(app)` or `state_of(request)`, which are typed; nothing
else is stored on ``app.ctx``. Event-loop thread only, unless a field's own class says more.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from sanic import Request, Sanic

from hypnos.catalog.catalog import Catalog
from hypnos.engines.devices import EngineBuild
from hypnos.service.config.schema import Config
from hypnos.service.keys import KeyRing, Limiter
from hypnos.service.scheduling.keep_alive import KeepAlive
from hypnos.service.inference.realtime_book import RealtimeBook
from hypnos.service.inference.stored_responses import ResponseStore
from hypnos.service.scheduling.readiness import Lifecycle
from hypnos.service.scheduling.turns import Turns
from hypnos.service.media.picture_store import PictureStore
from hypnos.service.observe.metrics import Metrics
from hypnos.service.observe.request_log import RequestLog
from hypnos.service.observe.telemetry import LatencyBook
from hypnos.service.observe.workflows import Workflows
from hypnos.service.scheduling.scheduler import Scheduler


@dataclass(slots=True, eq=False)
class AppState:
    config: Config                  # replaced in place by a config reload (config_watch.py)
    catalog: Catalog | None         # None: the pool routes cannot resolve catalog ids
    scheduler: Scheduler
    builds: dict[str, EngineBuild]  # engine -> the build it runs on (scheduling/accel.py)
    gpu_warning: str | None         # why an accelerator goes unused, logged once at start
    metrics: Metrics
    latency: LatencyBook
    workflows: Workflows
    keys: KeyRing
    limiter: Limiter
    request_log: RequestLog
    keep_alive: KeepAlive
    responses: ResponseStore        # /v1/responses kept for previous_response_id
    started: float                  # time.monotonic() at create_app: uptime
    created: float                  # time.time() at create_app: the models' "created"
    lifecycle: Lifecycle            # readiness, and its one owner of transitions
    before_stage: Callable[[], None] | None   # run in a thread before staging
    staging: asyncio.Task[None] | None = None       # set once the server started
    config_watch: asyncio.Task[None] | None = None  # set by lifecycle/config_watch.py
    pictures: PictureStore | None = None  # documents' pictures, made at the first use
    openapi: dict[str, Any] | None = None  # the /openapi.json document, built once
    mcp: Any = None       # the /mcp endpoint's SDK session manager, made at first use
    pulls: Turns = field(default_factory=Turns)   # one /api/pull per model id at a time
    realtime: RealtimeBook = field(default_factory=RealtimeBook)   # open /v1/realtime sessions


def state(app: Sanic) -> AppState:
    return cast(AppState, app.ctx)


def state_of(request: Request) -> AppState:
    return cast(AppState, request.app.ctx)
