"""POST /v1/rerank, /rerank (llama-server's two names) and /v2/rerank (Cohere's, for its SDK
with a base URL): one query against documents, in llama-server's shape (Jina's and Cohere's
result fields), plus hypnos_telemetry.

``documents`` are strings or ``{"text": ...}`` objects; ``top_n`` cuts the sorted results;
``return_documents`` adds each one's ``document: {"text"}``. ``instruction`` (ours) says what
relevance means to a chat model judging. The scoring is ``inference/rerank``.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service import errors
from hypnos.service.http.caller import caller_of
from hypnos.service.http.openapi import INFERENCE_ERRORS, endpoint, json_object, needs_ready
from hypnos.service.inference.rerank import RerankParams, rerank
from hypnos.service.observe.record import record_of
from hypnos.service.state import state_of
from hypnos.service.wire.body import json_body
from hypnos.service.wire.model import Says, Wire, validate

bp = Blueprint("rerank")


class TextDocument(Wire):
    text: str


class RerankBody(Wire):
    """Cohere's ``max_tokens_per_doc`` and ``rank_fields`` are accepted and ignored."""
    model: Annotated[str, Field(min_length=1),
                     Says("'model' is required: the id of a reranker or a chat model")]
    query: Annotated[str, Field(min_length=1), Says("'query' must be a non-empty string")]
    documents: Annotated[list[str | TextDocument], Field(min_length=1),
                         Says("'documents' must be a non-empty array of strings or "
                              "{\"text\": string} objects")]
    top_n: Annotated[int, Field(ge=1), Says("'top_n' must be a positive integer")] | None = None
    return_documents: Annotated[bool, Says("'return_documents' must be a boolean")] = False
    instruction: Annotated[str, Field(min_length=1),
                           Says("'instruction' must be a non-empty string")] | None = None


def parse_rerank(body: dict, max_prompt_chars: int) -> tuple[RerankParams, bool]:
    """The typed request and ``return_documents``, or a 400 naming the field."""
    wire = validate(RerankBody, body)
    texts = [d if isinstance(d, str) else d.text for d in wire.documents]
    chars = len(wire.query) + sum(len(t) for t in texts)
    if chars > max_prompt_chars:
        raise errors.InvalidRequest(f"The query and documents hold {chars} characters, above "
                                    f"max_prompt_chars ({max_prompt_chars})", param="documents")
    return RerankParams(model=wire.model, query=wire.query, documents=texts, top_n=wire.top_n,
                        instruction=wire.instruction), wire.return_documents


@needs_ready
@endpoint("Rerank documents against a query (llama-server, Jina and Cohere shape)",
          body=RerankBody, errors=INFERENCE_ERRORS,
          ok=json_object("object", "model", "results", "usage", object={"const": "list"},
                         results={"type": "array", "items": {
                             "type": "object", "required": ["index", "relevance_score"]}}))
async def rerank_documents(request: Request) -> HTTPResponse:
    params, with_text = parse_rerank(json_body(request),
                                     state_of(request).config.limits.max_prompt_chars)
    ranked = await rerank(caller_of(request), params)
    tokens = ranked.result.prompt_tokens
    results = [{"index": i, "relevance_score": score}
               | ({"document": {"text": params.documents[i]}} if with_text else {})
               for i, score in ranked.order]
    record_of(request).tokens_in = tokens
    return json_response({"object": "list", "model": params.model, "results": results,
                          "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                          "hypnos_telemetry": ranked.telemetry}, headers=ranked.headers)


bp.add_route(rerank_documents, "/v1/rerank", methods=["POST"])
bp.add_route(rerank_documents, "/rerank", methods=["POST"], name="rerank_short")
bp.add_route(rerank_documents, "/v2/rerank", methods=["POST"], name="rerank_cohere")
