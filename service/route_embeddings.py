"""POST /v1/embeddings (spec 8): OpenAI's request and response, plus hypnos_telemetry.

``encoding_format`` "float" (the default) answers JSON float arrays; "base64" answers each
vector as the base64 of its little-endian float32 bytes, which is what the official OpenAI
clients ask for by default and decode.
"""
from __future__ import annotations

import base64
import threading
import time
from dataclasses import dataclass

import numpy as np
from sanic import Blueprint, Request
from sanic.response import json as json_response

from hypnos.engines.errors import ContextOverflow, EngineError
from hypnos.service import errors
from hypnos.service.engine_call import run_engine
from hypnos.service.http import deadline_ms, json_body, require_ready
from hypnos.service.telemetry import telemetry
from hypnos.service.openapi import INFERENCE_ERRORS, endpoint, json_object

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


def _check_model(request: Request, params: EmbeddingParams) -> None:
    st = request.app.ctx.scheduler.get(params.model)
    if "embeddings" not in st.cfg.all_modalities:
        raise errors.InvalidRequest(f"The model '{params.model}' does not serve embeddings "
                                    f"(its modality is {st.cfg.modality})", param="model")



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
    _check_model(request, params)
    sched = request.app.ctx.scheduler
    async with sched.lease(params.model, deadline_ms=deadline_ms(request)) as lease:
        if not hasattr(lease.engine, "embed"):
            raise errors.ModelNotAvailable(
                f"The model '{params.model}' lists embeddings, but its engine "
                f"({lease.model.cfg.engine}) cannot embed; give it modality = \"embeddings\"")
        started = time.monotonic()
        try:
            result = await run_engine(lease.engine.embed, params.texts,
                                          cancel=threading.Event())
        except ContextOverflow as exc:
            raise errors.InvalidRequest(str(exc), param="input") from None
        except EngineError as exc:
            raise errors.ServerError(f"The engine failed: {exc}") from None
        inference_ms = (time.monotonic() - started) * 1000
        placement = sched.placement_of(lease.model).to_wire()
        wait = ({} if lease.estimated_wait_ms is None
                else {"x-hypnos-estimated-wait-ms": f"{lease.estimated_wait_ms:.0f}"})
    body = {
        "object": "list", "model": params.model,
        "data": [{"object": "embedding", "index": i,
                  "embedding": encode(v, params.encoding_format)}
                 for i, v in enumerate(result.vectors)],
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        "hypnos_telemetry": telemetry(lease, placement, inference_ms,
                                      {"queue_ms": round(lease.queue_ms, 2)}),
    }
    request.ctx.result = result
    return json_response(body, headers=wait)
