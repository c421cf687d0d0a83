"""POST /v1/entities (spec 13): zero-shot entity extraction with free-text labels.

Offsets are [start, end) in Unicode code points (Python string indexes), as the spec says;
JavaScript clients convert before slicing strings with astral characters.
"""
from __future__ import annotations

from dataclasses import dataclass

from sanic import Blueprint, Request
from sanic.response import json as json_response

from hypnos.engines.records import ExtractRequest
from hypnos.service.http import errors
from hypnos.service.http.layers import json_body, require_ready
from hypnos.service.inference.capabilities import ENTITIES
from hypnos.service.inference.leased import leased
from hypnos.service.http.openapi import INFERENCE_ERRORS, endpoint

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
    async with leased(request, params.model, ENTITIES, param="input") as call:
        result = await call.run(call.engine.extract, params.request)
        tele = call.telemetry({"queue_ms": call.queue_ms, "windows": result.windows,
                               "label_families": result.families})
        wait = call.wait_headers()
    texts = params.request.texts
    body = {
        "object": "list", "model": params.model,
        "data": [{"object": "entities", "index": i, "entities": [
            {"text": e.text, "label": e.label, "start": e.start, "end": e.end,
             "score": round(e.score, 4)} for e in found]}
            for i, found in enumerate(result.entities)],
        "usage": {"texts": len(texts), "characters": sum(len(t) for t in texts)},
        "hypnos_telemetry": tele,
    }
    request.ctx.result = result
    return json_response(body, headers=wait)
