"""POST /v1/completions: the legacy single-string completion (Fermion), streaming too.

The prompt goes to the model as it is (no chat template). Shares sampling, stop strings,
``n``, the 422 and the turn with chat (`wire.completions` parses, the raw prompt's lease,
`wire.openai_out.CompletionCodec` renders); ``logprobs`` is the legacy integer (0..5) and
answers in the legacy shape (tokens / token_logprobs / top_logprobs / text_offset).
"""
from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from hypnos.service.http.caller import caller_of
from hypnos.service.http.openapi import ANY_OBJECT, endpoint, needs_ready
from hypnos.service.http.sink import http_turn
from hypnos.service.inference.chat_checks import raw_lease
from hypnos.service.state import state_of
from hypnos.service.wire.body import json_body
from hypnos.service.wire.completions import CompletionsBody, parse_completion
from hypnos.service.wire.openai_out import CompletionCodec

bp = Blueprint("completions")


@bp.post("/v1/completions")
@needs_ready
@endpoint("Text completion (OpenAI legacy); SSE when stream is true",
          body=CompletionsBody, errors=(404, 422, 429, 500, 503, 507),
          ok={"application/json": ANY_OBJECT, "text/event-stream": {"type": "string"}})
async def completions(request: Request) -> HTTPResponse | None:
    c = parse_completion(json_body(request), state_of(request).config.limits)
    codec = CompletionCodec(c.model, c.prompt, echo=c.echo, include_usage=c.include_usage,
                            n_status=c.n_status)
    lease = raw_lease(caller_of(request), c.model, c.prompt, c.request.max_tokens)
    return await http_turn(request, lease, c.request, codec, stream=c.stream, n=c.n)
