"""POST /v1/entities (spec 13): zero-shot entity extraction with free-text labels.

Offsets are [start, end) in Unicode code points (Python string indexes), as the spec says;
JavaScript clients convert before slicing strings with astral characters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines.records import ExtractRequest
from hypnos.service.http.caller import caller_of
from hypnos.service.wire.body import json_body
from hypnos.service.inference.capabilities import ENTITIES
from hypnos.service.inference.leased import leased
from hypnos.service.wire.model import Says, Wire, input_texts, validate
from hypnos.service.http.openapi import INFERENCE_ERRORS, endpoint, needs_ready
from hypnos.service.state import state_of

bp = Blueprint("entities")


@dataclass
class EntityParams:
    model: str
    request: ExtractRequest


LABEL = Annotated[str, Field(pattern=r"\S"),
                  Says("'{at}' must be a label phrase (a string that is not blank)")]


class EntitiesBody(Wire):
    model: Annotated[str, Field(min_length=1),
                     Says("'model' is required: a model serving entity_extraction")]
    input: Annotated[str | Annotated[list[Annotated[str, Says("'{at}' must be a string")]],
                                     Field(min_length=1)],
                     Says("'input' must be a string or a non-empty array of strings")]
    labels: Annotated[LABEL | Annotated[list[LABEL], Field(min_length=1)],
                      Says("'labels' must be a non-empty array of label phrases")]
    threshold: Annotated[float, Field(ge=0, le=1),
                         Says("'threshold' must be a number from 0 to 1, got {got}")] | None = None
    flat: Annotated[bool, Says("'flat' must be true or false, got {got}")] | None = None


def parse_entities(body: dict, max_prompt_chars: int) -> EntityParams:
    wire = validate(EntitiesBody, body)
    texts = input_texts(wire.input, max_prompt_chars)
    raw_labels = [wire.labels] if isinstance(wire.labels, str) else wire.labels
    labels = list(dict.fromkeys(label.strip() for label in raw_labels))
    threshold = 0.5 if wire.threshold is None else wire.threshold
    return EntityParams(wire.model, ExtractRequest(
        texts=texts, labels=labels, threshold=float(threshold),
        flat=True if wire.flat is None else wire.flat))


@bp.post("/v1/entities")
@needs_ready
@endpoint("Named entities in texts for given labels (GLiNER)", body=EntitiesBody,
          errors=INFERENCE_ERRORS)
async def entities(request: Request) -> HTTPResponse:
    params = parse_entities(json_body(request), state_of(request).config.limits.max_prompt_chars)
    async with leased(caller_of(request), params.model, ENTITIES, param="input") as call:
        result = await call.run(call.extractor.extract, params.request)
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
    return json_response(body, headers=wait)
