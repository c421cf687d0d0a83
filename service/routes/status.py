"""GET /health, /ready, /v1/models (OpenAI's list, Codex's catalog, Anthropic's list),
/v1/models/{id}, /v1/models/catalog, POST /v1/advisor."""
from __future__ import annotations

import time
from typing import Annotated

from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.catalog.catalog import NEEDS
from hypnos.catalog.state import catalog_wire
from hypnos.service import errors
from hypnos.service.scheduling.accel import status_fields
from hypnos.service.wire.body import read_body
from hypnos.service.wire.model import Says, Wire
from hypnos.service.http.openapi import endpoint, hypnos_version, json_object
from hypnos.service.state import state_of
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.inference.model_facts import facts, listed
from hypnos.service.wire.model_lists import (ModelFacts, anthropic_list, anthropic_model,
                                             codex_catalog)

bp = Blueprint("status")

DOCUMENTS_HEALTH = {
    "type": "object", "description": "each docling model in service: what it can do here",
    "additionalProperties": {
        "type": "object", "required": ["layout_model", "ocr_engine", "warning"],
        "properties": {"layout_model": {"type": "boolean"},
                       "ocr_engine": {"type": ["string", "null"]},
                       "warning": {"type": ["string", "null"]}}}}


def documents_health(sched: Scheduler) -> dict:
    """Model id -> docling_convert.readiness for each enabled docling model (cheap: checks
    files, imports nothing)."""
    from hypnos.engines.docling_convert import readiness
    return {st.id: readiness(st.paths.get("weights_path")) for st in sched.models.values()
            if st.enabled and st.cfg.engine == "docling"}


@bp.get("/health")
@endpoint("Liveness: always 200 while the process serves; backend and accelerator say what "
          "the engine builds compute on",
          ok=json_object("status", "service", "version", "backend", "accelerator",
                         status={"const": "ok"}, backend={"enum": ["cuda", "metal", "cpu"]},
                         accelerator={"type": "boolean"}, documents=DOCUMENTS_HEALTH))
async def health(request: Request) -> HTTPResponse:
    sched = state_of(request).scheduler
    return json_response({"status": "ok", "service": "hypnos", "version": hypnos_version(),
                          "uptime_secs": int(time.monotonic() - state_of(request).started),
                          **status_fields(sched, state_of(request).builds),
                          **({"documents": docs} if (docs := documents_health(sched)) else {})})


@bp.get("/ready")
@endpoint("Readiness: 503 while startup staging runs or the server shuts down",
          ok=json_object("ready", ready={"const": True}),
          other={503: {"type": "object", "required": ["ready", "reason"],
                       "properties": {"ready": {"const": False}, "reason": {"type": "string"}}}})
async def ready(request: Request) -> HTTPResponse:
    lifecycle = state_of(request).lifecycle
    if lifecycle.ready:
        return json_response({"ready": True})
    return json_response({"ready": False, "reason": lifecycle.readiness.reason}, status=503)


ANTHROPIC_MODEL = {
    "type": "object", "required": ["type", "id", "display_name", "created_at", "lifecycle"],
    "properties": {"type": {"const": "model"}, "id": {"type": "string"},
                   "display_name": {"type": "string"}, "lifecycle": {"const": "active"},
                   "created_at": {"type": "string", "format": "date-time"},
                   "max_input_tokens": {"type": "integer"}, "max_tokens": {"type": "integer"}}}
MODEL_ROW = {"type": "object", "required": ["id", "object", "current_tier", "active_leases"],
             "properties": {"context_window": {"type": "integer"}}}
CODEX_MODEL = {"type": "object", "required": [
    "slug", "display_name", "context_window", "supported_reasoning_levels", "input_modalities",
    "model_messages"]}
OPENAI_LIST = json_object(
    "object", "backend", "accelerator", "data", object={"const": "list"},
    backend={"enum": ["cuda", "metal", "cpu"]}, accelerator={"type": "boolean"},
    data={"type": "array", "items": MODEL_ROW},
    models={"type": "array", "items": CODEX_MODEL})["application/json"]
ANTHROPIC_LIST = json_object(
    "data", "has_more", "first_id", "last_id", data={"type": "array", "items": ANTHROPIC_MODEL},
    has_more={"type": "boolean"})["application/json"]


def _openai_row(sched: Scheduler, st: ModelState, f: ModelFacts, created: int) -> dict:
    return {"id": f.id, "object": "model", "created": created, "owned_by": "hypnos",
            "modality": st.cfg.modality, "current_tier": str(st.tier),
            "placement": sched.placement_of(st).to_wire(),
            "active_leases": st.leases + st.holds,
            **({"context_window": f.context_window} if "text_generation" in
               st.cfg.all_modalities else {}),
            **({"alias_of": f.alias_of} if f.alias_of else {})}


def _anthropic(request: Request) -> bool:
    """The anthropic SDKs send their API version on every request; OpenAI's do not."""
    return "anthropic-version" in request.headers


@bp.get("/v1/models")
@endpoint("The models in service (disabled ones hidden). With Codex's client_version "
          "query, also Codex's models catalog; with an anthropic-version header, Anthropic's "
          "list instead. Every context window told is the per-slot context this machine "
          "funds", query={"client_version": {"type": "string"}},
          ok={"application/json": {"oneOf": [OPENAI_LIST, ANTHROPIC_LIST]}})
async def list_models(request: Request) -> HTTPResponse:
    sched = state_of(request).scheduler
    created = int(state_of(request).created)
    listing = listed(sched, state_of(request).config.limits.max_tokens_cap)
    if _anthropic(request):
        return json_response(anthropic_list([f for _, f in listing], created))
    fields = status_fields(sched, state_of(request).builds)
    body = {"object": "list", "backend": fields["backend"],
            "accelerator": fields["accelerator"],
            "data": [_openai_row(sched, st, f, created) for st, f in listing]}
    if "client_version" in request.args:
        body["models"] = codex_catalog([f for _, f in listing])
    return json_response(body)


@bp.get("/v1/models/<model_id>")
@endpoint("One model in service: its /v1/models row, or Anthropic's model object with an "
          "anthropic-version header", errors=(404,),
          ok={"application/json": {"oneOf": [MODEL_ROW, ANTHROPIC_MODEL]}})
async def model_info(request: Request, model_id: str) -> HTTPResponse:
    sched = state_of(request).scheduler
    created = int(state_of(request).created)
    st = sched.get(model_id)
    alias = model_id if model_id in st.cfg.aliases else None
    f = facts(sched, st, state_of(request).config.limits.max_tokens_cap, alias)
    if _anthropic(request):
        if not f.context_window:
            raise errors.NotFoundError(f"The model '{model_id}' is not a text model")
        return json_response(anthropic_model(f, created))
    return json_response(_openai_row(sched, st, f, created))


@bp.get("/v1/models/catalog")
@endpoint("The model catalog, with what is installed and configured", errors=(404,),
          query={"modality": {"type": "string"}})
async def catalog(request: Request) -> HTTPResponse:
    cat = state_of(request).catalog
    if cat is None:
        raise errors.NotFoundError("This server has no model catalog")
    cfg = state_of(request).config
    configured = {st.id: (st.enabled, st.cfg.weights_path)
                  for st in state_of(request).scheduler.models.values()}
    body = catalog_wire(cat, cfg.models_dir, modality=request.args.get("modality"),
                        configured=configured)
    return json_response(body)


class AdvisorBody(Wire):
    """A machine left out is this server's; ``unified_memory`` defaults to this machine's
    when ``vram_bytes`` is not sent, else false."""
    # The document lists the known needs; an unknown one is the advisor's own 400 naming them.
    needs: Annotated[list[Annotated[str, Field(min_length=1,
                                               json_schema_extra={"enum": list(NEEDS)})]],
                     Field(min_length=1),
                     Says("'needs' must be a non-empty array of non-empty strings")]
    vram_bytes: Annotated[int, Field(ge=1),
                          Says("'vram_bytes' must be a positive integer")] | None = None
    ram_bytes: Annotated[int, Field(ge=1),
                         Says("'ram_bytes' must be a positive integer")] | None = None
    unified_memory: Annotated[bool, Says("'unified_memory' must be a boolean")] | None = None


@bp.post("/v1/advisor")
@endpoint("Recommend a lineup for needs and a machine", body=AdvisorBody, errors=(404,),
          # No schema can state that machine: its smallest size depends on needs and catalog.
          meanings={400: "malformed request, or no lineup fits (a needed model does not fit "
                         "the machine's memory even alone)",
                    404: "this server has no model catalog"})
async def advisor(request: Request) -> HTTPResponse:
    from hypnos.advisor import AdvisorError, NoLineupFits, advise
    cat = state_of(request).catalog
    if cat is None:
        raise errors.NotFoundError("This server has no model catalog")
    body = read_body(request, AdvisorBody)
    hw = state_of(request).scheduler.hardware
    unified = body.unified_memory
    if unified is None:
        unified = hw.unified if body.vram_bytes is None else False
    vram = body.vram_bytes if body.vram_bytes is not None else (hw.vram_bytes or None)
    ram = body.ram_bytes if body.ram_bytes is not None else hw.ram_bytes
    try:
        result = advise(cat, list(body.needs), vram_bytes=vram, ram_bytes=ram,
                        unified_memory=unified)
    except NoLineupFits as exc:
        raise errors.InvalidRequest(str(exc)) from None
    except AdvisorError as exc:
        raise errors.InvalidRequest(str(exc), param="needs") from None
    return json_response(result)
