"""POST /v1/embeddings (spec 8): OpenAI's request and response, plus hypnos_telemetry.

``encoding_format`` "float" (the default) answers JSON float arrays; "base64" answers each
vector as the base64 of its little-endian float32 bytes, which is what the official OpenAI
clients ask for by default and decode.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service.http.caller import caller_of
from hypnos.service.wire.body import json_body
from hypnos.service.inference.capabilities import EMBEDDINGS
from hypnos.service.inference.leased import leased
from hypnos.service.observe.record import record_of
from hypnos.service.wire.model import Says, Wire, input_texts, validate
from hypnos.service.http.openapi import INFERENCE_ERRORS, endpoint, json_object, needs_ready
from hypnos.service.state import state_of

bp = Blueprint("embeddings")


@dataclass
class EmbeddingParams:
    model: str
    texts: list[str]
    encoding_format: str = "float"


NOT_TOKENS = "'{at}' must be a non-empty string (token-id arrays are not accepted)"


class EmbeddingsBody(Wire):
    """``dimensions`` (a positive integer) and ``user`` are accepted and ignored."""
    model: Annotated[str, Field(min_length=1),
                     Says("'model' is required: the id of an embeddings model")]
    input: Annotated[
        Annotated[str, Field(min_length=1), Says(NOT_TOKENS.format(at="input[0]"),
                                                 on=("string_too_short",))]
        | Annotated[list[Annotated[str, Field(min_length=1), Says(NOT_TOKENS)]],
                    Field(min_length=1)],
        Says("'input' must be a non-empty string or a non-empty array of non-empty strings")]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[int, Field(ge=1),
                          Says("'dimensions' must be a positive integer, got {got}")] | None = None
    user: str | None = None


def parse_embeddings(body: dict, max_prompt_chars: int) -> EmbeddingParams:
    """The typed request, or a 400 naming the field."""
    wire = validate(EmbeddingsBody, body)
    texts = input_texts(wire.input, max_prompt_chars)
    return EmbeddingParams(model=wire.model, texts=texts,
                           encoding_format=wire.encoding_format or "float")


def encode(vector: list[float], fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector



@bp.post("/v1/embeddings")
@needs_ready
@endpoint("Embeddings (OpenAI-compatible)", body=EmbeddingsBody, errors=INFERENCE_ERRORS,
          ok=json_object("object", "data", "model", object={"const": "list"},
                         data={"type": "array", "items": {
                             "type": "object", "required": ["object", "embedding", "index"]}}))
async def embeddings(request: Request) -> HTTPResponse:
    params = parse_embeddings(json_body(request), state_of(request).config.limits.max_prompt_chars)
    async with leased(caller_of(request), params.model, EMBEDDINGS, param="input") as call:
        result = await call.run(call.embedder.embed, params.texts)
        tele = call.telemetry({"queue_ms": call.queue_ms})
        wait = call.wait_headers()
    body = {
        "object": "list", "model": params.model,
        "data": [{"object": "embedding", "index": i,
                  "embedding": encode(v, params.encoding_format)}
                 for i, v in enumerate(result.vectors)],
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        "hypnos_telemetry": tele,
    }
    record_of(request).embedding(result)
    return json_response(body, headers=wait)
