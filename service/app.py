"""The Sanic app factory. No module-level state: everything lives on ``app.ctx``.

``create_app(config)`` builds the pool (one `ModelState` per configured model), the scheduler
and the routes. The port opens at once; the models with an ``initial_tier`` are staged in the
background afterwards (``/ready`` answers 503 until then, spec section 3).
"""
from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import time
from pathlib import Path
from collections.abc import Callable

from sanic import Sanic

from hypnos.catalog.catalog import Catalog
from hypnos.engines.devices import EngineBuild
from hypnos.planner.types import Hardware, ModelShape, Tier
from hypnos.service import accel
from hypnos.service import hardware as hw_probe
from hypnos.service.config import resolve_model_file
from hypnos.service.config_schema import Config, ModelConfig
from hypnos.service.effects import Effects, MachineEffects
from hypnos.service.metrics import Metrics
from hypnos.service.errors import install_error_handlers
from hypnos.service.http import after_handler, install_http_layers
from hypnos.service.keys import KeyRing, Limiter, QuotaBook, state_path
from hypnos.service.pool import ModelState
from hypnos.service.request_log import RequestLog
from hypnos.service.scheduler import Scheduler
from hypnos.service.telemetry import LatencyBook
from hypnos.service.workflows import Workflows

log = logging.getLogger("hypnos.app")
_names = itertools.count()
WHOLE_MODEL_WORKSPACE = 64 * 2**20
# One module per route family, each exposing ``bp``.
ROUTE_MODULES = ("route_status", "route_memory", "route_chat", "route_completions",
                 "route_embeddings", "route_transcriptions", "route_speech", "route_sessions",
                 "metrics", "route_pool", "route_logs", "route_documents", "route_entities",
                 "route_images", "route_playground", "openapi")


def model_shape(m: ModelConfig, paths: dict[str, Path]) -> ModelShape:
    """What the planner needs: GGUF metadata for llama.cpp models, file sizes otherwise."""
    weights = paths.get("weights_path")
    if m.engine == "ggml_llama" and weights is not None and weights.is_file():
        from hypnos.engines.gguf_meta import read_gguf_meta
        aux = paths.get("aux_path")
        projector = aux.stat().st_size if aux is not None and aux.is_file() else 0
        return read_gguf_meta(weights).to_shape(projector_bytes=projector)
    size = 0
    for p in paths.values():
        if p.is_dir():
            size += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.is_file():
            size += p.stat().st_size
    # Whether it may use the GPU is the scheduler's call (engine kind and build).
    return ModelShape(weights_bytes=size, workspace_bytes=WHOLE_MODEL_WORKSPACE)


def build_state(cfg: Config, m: ModelConfig) -> ModelState:
    """A pool entry; a model whose files are missing or unreadable is kept with a problem
    (503 naming it) so the others keep serving."""
    paths, problem = {}, None
    for key, rel in m.file_paths().items():
        try:
            paths[key] = resolve_model_file(cfg.models_dir, rel)
        except ValueError as exc:
            problem = f"{m.id}: {key} {exc}"
            continue
        if not paths[key].exists():
            problem = (f"The model '{m.id}' is configured but {key} {rel!r} is not in "
                       f"models_dir ({cfg.models_dir}); fetch it with ./run.sh models {m.id}")
    try:
        shape = model_shape(m, paths) if problem is None else ModelShape(weights_bytes=0)
    except (ValueError, OSError) as exc:
        shape, problem = ModelShape(weights_bytes=0), f"The model '{m.id}' cannot be read: {exc}"
    from hypnos.engines.registry import is_available
    if not is_available(m.engine, m.modality):
        problem = (f"The model '{m.id}' needs engine {m.engine}, which this version of "
                   "Hypnos does not implement yet")
    st = ModelState(cfg=m, paths=paths, shape=shape)
    st.problem = problem
    return st


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
    app = HypnosApp(name or f"hypnos-{next(_names)}")
    app.config.REQUEST_MAX_SIZE = config.limits.max_body_bytes
    app.config.REQUEST_TIMEOUT = config.limits.request_timeout_secs
    app.config.RESPONSE_TIMEOUT = config.limits.request_timeout_secs
    app.config.KEEP_ALIVE_TIMEOUT = 75
    app.config.NOISY_EXCEPTIONS = False
    hardware = hardware or hw_probe.probe(config.hardware.simulate)
    builds = builds if builds is not None else accel.engine_builds(hardware)
    metrics = Metrics()
    sched = Scheduler(config, hardware, effects or MachineEffects(metrics=metrics),
                      accelerated=accel.accelerated_engines(hardware, builds))
    app.ctx.builds = builds
    app.ctx.gpu_warning = accel.warn_once(hardware, builds, [m.engine for m in config.models])
    app.ctx.config = config
    app.ctx.catalog = catalog
    app.ctx.scheduler = sched
    app.ctx.metrics = metrics
    app.ctx.latency = LatencyBook()
    app.ctx.workflows = Workflows()
    app.ctx.keys = KeyRing(config.server)
    quotas = QuotaBook(state_path(config.source) if config.source is not None else None)
    app.ctx.limiter = Limiter(quotas, metrics=metrics)
    app.ctx.request_log = RequestLog(config.server.request_log)
    app.ctx.started = time.monotonic()
    app.ctx.created = time.time()
    app.ctx.ready = not stage
    app.ctx.draining = False
    app.ctx.ready_reason = "startup tier initialization in progress"
    app.ctx.before_stage = before_stage
    for m in config.models:
        sched.add(build_state(config, m))
    install_http_layers(app)
    install_error_handlers(app)
    for name in ROUTE_MODULES:
        app.blueprint(importlib.import_module(f"hypnos.service.{name}").bp)

    if stage:
        @app.after_server_start
        async def _begin_staging(app):
            app.ctx.staging = asyncio.create_task(stage_models(app))

    @app.before_server_stop
    async def _stop_staging(app):
        # Engines are not unloaded here: the process owning them is about to exit, and the
        # ASGI test client stops the "server" after every request.
        task = getattr(app.ctx, "staging", None)
        if task is not None and not task.done():
            task.cancel()

    return app


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
