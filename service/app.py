"""The Sanic app factory, and only that. No module-level state: everything lives in one
`AppState` (service/state.py), which is ``app.ctx``.

``create_app(config)`` builds the pool (one `ModelState` per configured model, `build`), the
scheduler, the HTTP layers and error handlers, and registers the routes of `routes.ROUTES`.
The port opens at once; the models with an ``initial_tier`` are staged in the background
afterwards (`staging`).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable

from sanic import Sanic

from hypnos.catalog.catalog import Catalog
from hypnos.engines.devices import EngineBuild
from hypnos.planner.types import Hardware
from hypnos.service.scheduling import accel
from hypnos.service.scheduling import hardware as hw_probe
from hypnos.service.config.load import state_dir
from hypnos.service.scheduling.prompt_cache import build_prompt_cache
from hypnos.service.config.schema import Config
from hypnos.service.scheduling.effects import Effects, MachineEffects
from hypnos.service.observe.metrics import Metrics
from hypnos.service.errors import install_error_handlers
from hypnos.service.scheduling.keep_alive import KeepAlive
from hypnos.service.http.layers import after_handler, install_http_layers
from hypnos.service.keys import KeyRing, Limiter, QuotaBook, state_path
from hypnos.service.observe.request_log import RequestLog
from hypnos.service.inference.stored_responses import DB_NAME, ResponseStore
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.observe.telemetry import LatencyBook
from hypnos.service.observe.workflows import Workflows
from hypnos.service.scheduling.build import build_state
from hypnos.service.routes import ROUTES
from hypnos.service.scheduling.readiness import Lifecycle
from hypnos.service.lifecycle.shutdown import PAST_GRACE_SECS
from hypnos.service.lifecycle.staging import stage_models
from hypnos.service.state import AppState, state

log = logging.getLogger("hypnos.app")
_names = itertools.count()
#: The largest WebSocket frame read (Sanic's default is 1 MiB). OpenAI's Realtime protocol
#: allows an event of up to 15 MiB, so a larger ``input_audio_buffer.append`` is read and
#: answered by the session's own bound (an ``error`` event), not by a dropped socket.
WEBSOCKET_MAX_FRAME_BYTES = 16 * 1024 * 1024


class HypnosApp(Sanic):
    async def handle_request(self, request):
        """Returns once the response is complete (a stream included): the place to measure
        end-to-end latency."""
        try:
            await super().handle_request(request)
        finally:
            after_handler(request)


def create_app(config: Config, *, catalog: Catalog | None = None,
               hardware: Hardware | None = None, effects: Effects | None = None,
               name: str | None = None, stage: bool = True,
               before_stage: Callable[[], None] | None = None,
               builds: dict[str, EngineBuild] | None = None) -> Sanic:
    """Build the server. ``before_stage`` runs in a thread before staging (the default
    lineup pulls its missing files there, so the port is already open meanwhile).
    ``hardware`` and ``builds`` replace the probes of the machine and of the engine builds
    (``service.accel``)."""
    hardware = hardware or hw_probe.probe(config.hardware.simulate)
    builds = builds if builds is not None else accel.engine_builds(hardware)
    metrics = Metrics()
    prompt_cache = build_prompt_cache(config, hardware, state_dir(config))
    effects = effects or MachineEffects(metrics=metrics,
                                        rpc_stall_secs=config.hardware.rpc_stall_secs,
                                        prompt_cache=prompt_cache)
    sched = Scheduler(config, hardware, effects,
                      accelerated=accel.accelerated_engines(hardware, builds),
                      prompt_cache=prompt_cache)
    quotas = QuotaBook(state_path(config.source) if config.source is not None else None)
    app_state = AppState(
        config=config, catalog=catalog, scheduler=sched, builds=builds,
        gpu_warning=accel.warn_once(hardware, builds, [m.engine for m in config.models]),
        metrics=metrics, latency=LatencyBook(), workflows=Workflows(),
        keys=KeyRing(config.server), limiter=Limiter(quotas, metrics=metrics),
        request_log=RequestLog(config.server.request_log), keep_alive=KeepAlive(sched),
        responses=ResponseStore(state_dir(config) / DB_NAME,
                                config.server.stored_responses_max_count,
                                config.server.stored_responses_max_bytes,
                                config.server.stored_responses_ttl_secs),
        started=time.monotonic(), created=time.time(),
        lifecycle=Lifecycle(staging=stage), before_stage=before_stage)
    app = HypnosApp(name or f"hypnos-{next(_names)}", ctx=app_state)
    app.config.REQUEST_MAX_SIZE = config.limits.max_body_bytes
    app.config.REQUEST_TIMEOUT = config.limits.request_timeout_secs
    app.config.RESPONSE_TIMEOUT = config.limits.request_timeout_secs
    app.config.KEEP_ALIVE_TIMEOUT = 75
    app.config.GRACEFUL_SHUTDOWN_TIMEOUT = PAST_GRACE_SECS      # after server.shutdown_grace_secs
    app.config.WEBSOCKET_MAX_SIZE = WEBSOCKET_MAX_FRAME_BYTES
    app.config.NOISY_EXCEPTIONS = False
    for m in config.models:
        sched.add(build_state(config, m))
    install_http_layers(app)
    install_error_handlers(app)
    for bp in ROUTES:
        app.blueprint(bp)

    if stage:
        @app.after_server_start
        async def _begin_staging(app):
            state(app).staging = asyncio.create_task(stage_models(app))

    @app.before_server_stop
    async def _stop_staging(app):
        # Engines are not unloaded here: the process owning them is about to exit, and the
        # ASGI test client stops the "server" after every request.
        task = state(app).staging
        if task is not None and not task.done():
            task.cancel()

    @app.after_server_stop
    async def _close_state(app):
        # The stored responses' database; it opens again on next use (the ASGI test client
        # "stops" after every request).
        state(app).responses.close()
        cache = state(app).scheduler.prompt_cache
        if cache is not None:       # the entries under way reach the disk tier
            await asyncio.to_thread(cache.flush, 5.0)

    return app
