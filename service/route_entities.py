"""POST /v1/entities (spec 13): zero-shot entity extraction with free-text labels.

Offsets are [start, end) in Unicode code points (Python string indexes), as the spec says;
JavaScript clients convert before slicing strings with astral characters.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sanic import Blueprint, Request
from sanic.response import json as json_response

from hypnos.engines.errors import EngineError
from hypnos.engines.records import ExtractRequest
from hypnos.service import errors
from hypnos.service.engine_call import run_engine
from hypnos.service.http import deadline_ms, json_body, require_ready
from hypnos.service.telemetry import telemetry, wait_headers
from hypnos.service.openapi import INFERENCE_ERRORS, endpoint

bp = Blueprint("entities")


@dataclass
class EntityParams:
    model: str
    request: ExtractRequest


def _strings(value, name: str, what: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise errors.InvalidRequest(f"'{name}' must be {what}", param=name)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise errors.InvalidRequest(f"'{name}[{i}]' must be a string", param=name)
    return items


def parse_entities(body: dict, max_prompt_chars: int) -> EntityParams:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise errors.InvalidRequest("'model' is required: a model serving entity_extraction",
                                    param="model")
    texts = _strings(body.get("input"), "input", "a string or a non-empty array of strings")
    chars = sum(len(t) for t in texts)
    if chars > max_prompt_chars:
        raise errors.InvalidRequest(f"The input holds {chars} characters, above "
                                    f"max_prompt_chars ({max_prompt_chars})", param="input")
    raw_labels = _strings(body.get("labels"), "labels", "a non-empty array of label phrases")
    labels = list(dict.fromkeys(label.strip() for label in raw_labels))
    if "" in labels:
        raise errors.InvalidRequest("'labels' must not hold empty phrases", param="labels")
    threshold = body.get("threshold", 0.5)
    if threshold is None:
        threshold = 0.5
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or not 0.0 <= threshold <= 1.0:
        raise errors.InvalidRequest(f"'threshold' must be a number from 0 to 1, got "
                                    f"{threshold!r}", param="threshold")
    flat = body.get("flat", True)
    if flat is None:
        flat = True
    if not isinstance(flat, bool):
        raise errors.InvalidRequest(f"'flat' must be true or false, got {flat!r}", param="flat")
    return EntityParams(model, ExtractRequest(texts=texts, labels=labels,
                                              threshold=float(threshold), flat=flat))


def _check_model(request: Request, model_id: str) -> None:
    st = request.app.ctx.scheduler.get(model_id)
    if "entity_extraction" not in st.cfg.all_modalities:
        raise errors.InvalidRequest(f"The model '{model_id}' does not serve entity_extraction "
                                    f"(its modality is {st.cfg.modality})", param="model")


ENTITIES_SCHEMA = {"type": "object", "required": ["model"], "properties": {
    "model": {"type": "string"}, "input": {"anyOf": [{"type": "string"}, {"type": "array"}]},
    "labels": {"anyOf": [{"type": "string"}, {"type": "array"}]},
    "threshold": {"type": "number", "minimum": 0, "maximum": 1}, "flat": {}}}


@bp.post("/v1/entities")
@endpoint("Named entities in texts for given labels (GLiNER)", body=ENTITIES_SCHEMA,
          errors=INFERENCE_ERRORS)
async def entities(request: Request):
    require_ready(request)
    params = parse_entities(json_body(request), request.app.ctx.config.limits.max_prompt_chars)
    _check_model(request, params.model)
    sched = request.app.ctx.scheduler
    async with sched.lease(params.model, deadline_ms=deadline_ms(request)) as lease:
        if not callable(getattr(lease.engine, "extract", None)):
            raise errors.ModelNotAvailable(f"The model '{params.model}' has no entity "
                                           "extractor in this version of Hypnos")
        started = time.monotonic()
        try:
            result = await run_engine(lease.engine.extract, params.request,
                                      cancel=threading.Event())
        except EngineError as exc:
            raise errors.ServerError(f"The engine failed: {exc}") from None
        inference_ms = (time.monotonic() - started) * 1000
        placement = sched.placement_of(lease.model).to_wire()
    texts = params.request.texts
    body = {
        "object": "list", "model": params.model,
        "data": [{"object": "entities", "index": i, "entities": [
            {"text": e.text, "label": e.label, "start": e.start, "end": e.end,
             "score": round(e.score, 4)} for e in found]}
            for i, found in enumerate(result.entities)],
        "usage": {"texts": len(texts), "characters": sum(len(t) for t in texts)},
        "hypnos_telemetry": telemetry(lease, placement, inference_ms, {
            "queue_ms": round(lease.queue_ms, 2), "windows": result.windows,
            "label_families": result.families}),
    }
    request.ctx.result = result
    return json_response(body, headers=wait_headers(lease))
