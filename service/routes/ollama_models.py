"""Ollama's /api/tags, /api/ps, /api/show and /api/version on the pool: the chat and embedding
models in Ollama's shapes."""
from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.planner.types import Tier
from hypnos.service.http.openapi import endpoint, json_object
from hypnos.service.scheduling.accel import model_device
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.state import state_of
from hypnos.service.wire.body import json_body
from hypnos.service.wire.model import validate
from hypnos.service.wire.ollama import ModelBody
from hypnos.service.wire.ollama_out import now

bp = Blueprint("ollama_models")
VERSION = "0.12.0"          # the Ollama API version whose shapes these routes follow


def _details(st: ModelState) -> dict:
    arch = st.cfg.arch
    family = getattr(arch, "architecture", None) or st.cfg.engine
    return {"parent_model": "", "format": "gguf" if st.cfg.engine == "ggml_llama" else
            st.cfg.engine, "family": family, "families": [family],
            "parameter_size": "", "quantization_level": st.cfg.quant or ""}


def _listed(st: ModelState) -> dict:
    return {"name": st.id, "model": st.id, "size": st.weight_bytes, "digest": "",
            "modified_at": now(), "details": _details(st)}


def _served(sched: Scheduler) -> list[ModelState]:
    """The pool's chat and embedding models (what Ollama's clients can use)."""
    return [st for st in sched.models.values() if st.enabled and set(
        st.cfg.all_modalities) & {"text_generation", "vision", "embeddings"}]


@bp.get("/api/tags")
@endpoint("Ollama tags: the pool's chat and embedding models", ok=json_object("models"))
async def tags(request: Request) -> HTTPResponse:
    return json_response({"models": [_listed(st) for st in _served(state_of(request).scheduler)]})


@bp.get("/api/ps")
@endpoint("Ollama ps: the models in tier 1, with the VRAM booked for them (0 on the CPU)",
          ok=json_object("models"))
async def ps(request: Request) -> HTTPResponse:
    sched = state_of(request).scheduler
    timers = state_of(request).keep_alive
    out = []
    for st in _served(sched):
        if st.tier is not Tier.GPU:
            continue
        placement = sched.placement_of(st)
        on_gpu = model_device(st, placement) not in ("cpu", None)
        out.append({**_listed(st), "expires_at": timers.expires_at(st.id),
                    "size_vram": placement.booked_tier1_bytes if on_gpu else 0,
                    "context_length": sched.context_window(st)})
    return json_response({"models": out})


@bp.post("/api/show")
@endpoint("Ollama show: a model's details and capabilities", body=ModelBody,
          ok=json_object("details", "capabilities"), errors=(404,))
async def show(request: Request) -> HTTPResponse:
    wire = validate(ModelBody, json_body(request))
    st = state_of(request).scheduler.get(wire.id)
    mods = set(st.cfg.all_modalities)
    caps = (["completion"] if mods & {"text_generation", "vision"} else []) + (
        ["embedding"] if "embeddings" in mods else []) + (
        ["vision"] if "vision" in mods else []) + (
        ["tools"] if "text_generation" in mods and st.cfg.tool_format != "none" else [])
    return json_response({"modelfile": "", "parameters": "", "template": "",
                          "details": _details(st), "capabilities": caps,
                          "model_info": {"general.architecture": _details(st)["family"],
                                         "context_length": state_of(request).scheduler
                                         .context_window(st)}})


@bp.get("/api/version")
@endpoint("The Ollama API version these routes follow", ok=json_object("version"))
async def version(request: Request) -> HTTPResponse:
    return json_response({"version": VERSION})

