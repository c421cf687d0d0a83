"""The model pool at run time (spec section 6): POST /v1/models, PUT and DELETE
/v1/models/{id}, POST /v1/models/{id}/enable|disable|moe-offload.

A model added or replacing another goes through the startup checks (`checked_model`); the
change is made by the scheduler (`Scheduler.swap`, which drains) and kept in the overlay
beside the config (`overlay.persist`).
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.planner.types import MoeOffload
from hypnos.service import errors
from hypnos.service.config.load import ConfigError, parse_model_block
from hypnos.service.config.schema import ModelConfig
from hypnos.service.wire.body import read_body
from hypnos.service.wire.model import Says, Wire, refuse
from hypnos.service.scheduling.model_checks import startup_checks
from hypnos.service.config.overlay import persist
from hypnos.service.lifecycle.catalog_pool import refuse_conflict
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.http.openapi import endpoint, admin_only, needs_ready
from hypnos.service.state import state_of
from typing import Any

bp = Blueprint("pool")
DEFAULT_DRAIN_SECS = 120.0
DRAIN_MESSAGE = "'drain_secs' must be a number of seconds from 0 to 86400"


class PoolBody(Wire):
    """Exactly one of ``catalog`` (an entry of GET /v1/models/catalog) or ``config`` (one
    [[models]] block); ``drain_secs`` (PUT) is how long in-flight requests may finish."""
    model_config = ConfigDict(json_schema_extra={"oneOf": [
        {"required": ["catalog"], "properties": {"catalog": {"type": "string"}}},
        {"required": ["config"], "properties": {"config": {"type": "string"}}}]})
    catalog: Annotated[str, Says("'catalog' must be a string")] | None = None
    config: Annotated[str, Says("'config' must be a string")] | None = None
    drain_secs: Annotated[float, Field(ge=0, le=86400), Says(DRAIN_MESSAGE)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> PoolBody:
        if (self.catalog is None) == (self.config is None):
            raise refuse("Send exactly one of 'catalog' (an entry of GET /v1/models/catalog) "
                         "or 'config' (one [[models]] block)")
        return self


class MoeBody(Wire):
    mode: Annotated[Literal["off", "auto", "on"], Says(
        "'mode' must be one of off, auto, on, got {got}")]


def _block_text(request: Request, body: PoolBody) -> str:
    """The ``[[models]]`` TOML of a POST/PUT body."""
    spec, text = body.catalog, body.config
    if text is not None:
        return text
    assert spec is not None
    from hypnos.catalog.blocks import config_block
    from hypnos.catalog.catalog import CatalogError
    catalog = state_of(request).catalog
    if catalog is None:
        raise errors.InvalidRequest("This server has no model catalog", param="catalog")
    try:
        entry, variant = catalog.resolve(spec)
        catalog.check_supported(entry)
    except CatalogError as exc:
        raise errors.InvalidRequest(str(exc), param="catalog") from None
    return config_block(entry, variant)


async def checked_model(request: Request, body: PoolBody, model_id: str | None) -> tuple[
        ModelState, str]:
    """The startup checks (spec section 6): a valid block, its files inside models_dir and
    present, readable weights, a tested architecture. 400 naming every problem found; 409
    first, before any file is read, when the pool with this model in would not start (an id
    or alias another model answers to)."""
    text = _block_text(request, body)
    try:
        m = parse_model_block(text)
    except ConfigError as exc:
        raise errors.InvalidRequest("The model block is invalid: " + "; ".join(exc.problems),
                                    param="config") from None
    if model_id is not None:
        m = dataclasses.replace(m, id=model_id)
    refuse_conflict(request.app, m.id, m)
    catalog = state_of(request).catalog
    tested = catalog.tested_architectures if catalog is not None else None
    st, problems = await asyncio.to_thread(startup_checks, state_of(request).config, m, tested)
    if problems:
        raise errors.InvalidRequest("; ".join(problems), param="config")
    assert st is not None           # no problems: the state was built
    return st, text


def _replace_config(request: Request, model_id: str, m: ModelConfig | None) -> None:
    """Keep ``state(app).config.models`` (staging, the catalog's "configured") in step."""
    cfg = state_of(request).config
    models = [x for x in cfg.models if x.id != model_id]
    cfg.models = models + ([m] if m is not None else [])


def _answer(request: Request, st: ModelState | None, model_id: str, action: str,
            persisted: bool, status: int = 200) -> HTTPResponse:
    body = {"model": model_id, "action": action, "persisted": persisted}
    if st is not None:
        body["placement"] = state_of(request).scheduler.placement_of(st).to_wire()
    return json_response(body, status=status)


def _drain_secs(value: Any) -> float:
    if value is None:
        return DEFAULT_DRAIN_SECS
    try:
        secs = float(value)
    except (TypeError, ValueError):
        secs = -1.0
    if isinstance(value, bool) or not 0 <= secs <= 86400:
        raise errors.InvalidRequest(DRAIN_MESSAGE, param="drain_secs")
    return secs


# What a change of the pool answers besides its 400 (a failed startup check): the checks
# run and the model is installed cold, so nothing loads, and no 422, 500 or 507 can come.
ADD_MEANINGS = {400: "malformed request, or the model fails the startup checks",
                403: "not an admin key (with API keys set)",
                409: "the pool after the change would not start: an id or alias another "
                     "model answers to, or a model another names as its draft",
                503: "still staging"}
POOL_MEANINGS = {**ADD_MEANINGS, 404: "unknown model id",
                 429: "drain_secs passed with requests still running, the model is already "
                      "being changed, or rate limited"}
POOL_ERRORS = (403, 404, 409, 429, 503)


@bp.post("/v1/models")
@admin_only
@needs_ready
@endpoint("Add a model to the pool (admin)", body=PoolBody, status=201,
          errors=(403, 409, 503), meanings=ADD_MEANINGS)
async def add_model(request: Request) -> HTTPResponse:
    body = read_body(request, PoolBody)
    st, text = await checked_model(request, body, None)
    sched = state_of(request).scheduler
    if st.id in sched.models:
        raise errors.InvalidRequest(f"The id '{st.id}' is taken; PUT /v1/models/{st.id} "
                                    "replaces that model", param="config")
    sched.add(st)
    _replace_config(request, st.id, st.cfg)
    persisted = await asyncio.to_thread(persist, state_of(request).config.source, st.id, text)
    return _answer(request, st, st.id, "added", persisted, status=201)


@bp.put("/v1/models/<model_id>")
@admin_only
@needs_ready
@endpoint("Replace a model in the pool (admin)", body=PoolBody, errors=POOL_ERRORS,
          meanings=POOL_MEANINGS)
async def replace_model(request: Request, model_id: str) -> HTTPResponse:
    sched = state_of(request).scheduler
    model_id = sched.get(model_id, enabled_only=False).id     # an alias names its model
    body = read_body(request, PoolBody)
    drain = _drain_secs(body.drain_secs)
    async with sched.pool.changing(model_id):       # requests arriving from now on wait
        st, text = await checked_model(request, body, model_id)
        await sched.pool.drain_and_install(model_id, st, drain)
    _replace_config(request, model_id, st.cfg)
    persisted = await asyncio.to_thread(persist, state_of(request).config.source, model_id, text)
    return _answer(request, st, model_id, "replaced", persisted)


@bp.delete("/v1/models/<model_id>")
@admin_only
@needs_ready
@endpoint("Remove a model from the pool (admin)", errors=POOL_ERRORS,
          meanings={**POOL_MEANINGS, 400: "drain_secs is not a number of seconds from 0 to "
                                          "86400"},
          query={"drain_secs": {"type": "string"}})
async def remove_model(request: Request, model_id: str) -> HTTPResponse:
    sched = state_of(request).scheduler
    model_id = sched.get(model_id, enabled_only=False).id     # an alias names its model
    refuse_conflict(request.app, model_id, None)
    await sched.pool.swap(model_id, None, _drain_secs(request.args.get("drain_secs")))
    _replace_config(request, model_id, None)
    persisted = await asyncio.to_thread(persist, state_of(request).config.source, model_id, None)
    return _answer(request, None, model_id, "removed", persisted)


# Enable and disable are not changes of the pool (spec section 6): any key may call them.
SWITCH_MEANINGS = {404: "unknown model id", 503: "still staging"}


async def _switch(request: Request, model_id: str, enabled: bool) -> HTTPResponse:
    sched = state_of(request).scheduler
    st = await sched.pool.set_enabled(model_id, enabled)
    return json_response({"model": model_id, "enabled": st.enabled,
                          "placement": sched.placement_of(st).to_wire()})


@bp.post("/v1/models/<model_id>/enable")
@needs_ready
@endpoint("Enable a model", errors=(404, 503), meanings=SWITCH_MEANINGS)
async def enable(request: Request, model_id: str) -> HTTPResponse:
    return await _switch(request, model_id, True)


@bp.post("/v1/models/<model_id>/disable")
@needs_ready
@endpoint("Disable a model", errors=(404, 429, 503), meanings={
    **SWITCH_MEANINGS, 429: "the model is leased (retry when idle), or rate limited"})
async def disable(request: Request, model_id: str) -> HTTPResponse:
    return await _switch(request, model_id, False)


@bp.post("/v1/models/<model_id>/moe-offload")
@needs_ready
@endpoint("Change a model's MoE offload mode", errors=(404, 422, 429, 503, 507),
          body=MoeBody, meanings={422: "mode is not off, auto or on"})
async def moe_offload(request: Request, model_id: str) -> HTTPResponse:
    sched = state_of(request).scheduler
    st = sched.get(model_id, enabled_only=False)
    try:        # an unknown mode is the spec's 422
        wire = read_body(request, MoeBody)
    except errors.InvalidRequest as exc:
        raise errors.UnprocessableEntity(exc.message, param=exc.param) from None
    mode = MoeOffload(wire.mode)
    applies = await sched.pool.set_moe_offload(model_id, mode)
    return json_response({"model": model_id, "moe_offload": str(mode), "applies": applies,
                          "placement": sched.placement_of(st).to_wire()})
