"""POST /v1/embeddings (spec 8): OpenAI's request and response, plus hypnos_telemetry.

``encoding_format`` "float" (the default) answers JSON float arrays; "base64" answers each
vector as the base64 of its little-endian float32 bytes, which is what the official OpenAI
clients ask for by default and decode.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np
from sanic import Blueprint, Request
from sanic.response import json as json_response

from hypnos.service.http import errors
from hypnos.service.http.layers import json_body, require_ready
from hypnos.service.inference.capabilities import EMBEDDINGS
from hypnos.service.inference.leased import leased
from hypnos.service.http.openapi import INFERENCE_ERRORS, endpoint, json_object

bp = Blueprint("embeddings")
ENCODINGS = ("float", "base64")


@dataclass
class EmbeddingParams:
    model: str
    texts: list[str]
    encoding_format: str = "float"


def parse_embeddings(body: dict, max_prompt_chars: int) -> EmbeddingParams:
    """The typed request, or a 400 naming the field. ``dimensions`` (a positive integer)
    and ``user`` are accepted and ignored."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise errors.InvalidRequest("'model' is required: the id of an embeddings model",
                                    param="model")
    raw = body.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts:
        raise errors.InvalidRequest("'input' must be a non-empty string or a non-empty array "
                                    "of non-empty strings", param="input")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text:
            raise errors.InvalidRequest(
                f"'input[{i}]' must be a non-empty string (token-id arrays are not accepted)",
                param="input")
    chars = sum(len(t) for t in texts)
    if chars > max_prompt_chars:
        raise errors.InvalidRequest(f"The input holds {chars} characters, above "
                                    f"max_prompt_chars ({max_prompt_chars})", param="input")
    dims = body.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise errors.InvalidRequest(f"'dimensions' must be a positive integer, got {dims!r}",
                                    param="dimensions")
    fmt = body.get("encoding_format", "float")
    if fmt is None:
        fmt = "float"
    if fmt not in ENCODINGS:
        raise errors.InvalidRequest(f"'encoding_format' must be one of {', '.join(ENCODINGS)}, "
                                    f"got {fmt!r}", param="encoding_format")
    return EmbeddingParams(model=model, texts=texts, encoding_format=fmt)


def encode(vector: list[float], fmt: str):
    if fmt == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector



EMBEDDINGS_SCHEMA = {"type": "object", "required": ["model", "input"], "properties": {
    "model": {"type": "string", "minLength": 1},
    # The items' shape (non-empty strings, no token ids) is left to parse_embeddings, whose
    # messages say more than a schema's would.
    "input": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1}]},
    "encoding_format": {"enum": list(ENCODINGS)}, "dimensions": {"type": "integer", "minimum": 1},
    "user": {"type": "string"}}}


@bp.post("/v1/embeddings")
@endpoint("Embeddings (OpenAI-compatible)", body=EMBEDDINGS_SCHEMA, errors=INFERENCE_ERRORS,
          ok=json_object("object", "data", "model", object={"const": "list"},
                         data={"type": "array", "items": {
                             "type": "object", "required": ["object", "embedding", "index"]}}))
async def embeddings(request: Request):
    require_ready(request)
    params = parse_embeddings(json_body(request), request.app.ctx.config.limits.max_prompt_chars)
    async with leased(request, params.model, EMBEDDINGS, param="input") as call:
        result = await call.run(call.engine.embed, params.texts)
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
    request.ctx.result = result
    return json_response(body, headers=wait)
