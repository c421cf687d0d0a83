"""POST /v1/chat/completions (spec 7, plus the Pantheon / Fermion request features the
chat issue names): non-streaming and SSE streaming, n choices, tools, thinking, logprobs.
The body is parsed (`wire.chat`), the turn runs under the chat lease (`inference.turn`) and
is rendered by `wire.openai_out.ChatCompletionCodec`."""
from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request

from hypnos.service.http.caller import caller_of, session_key
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.http.sink import http_turn
from hypnos.service.inference.chat_checks import chat_lease
from hypnos.service.state import state_of
from hypnos.service.wire.body import json_body
from hypnos.service.wire.chat import ChatBody, parse_chat
from hypnos.service.wire.openai_out import ChatCompletionCodec
from hypnos.service.wire.sessions import session_yields

bp = Blueprint("chat")


@bp.post("/v1/chat/completions")
@needs_ready
@endpoint("Chat completion (OpenAI-compatible); SSE when stream is true", body=ChatBody,
          ok={**json_object("id", "object", "model", "choices", "usage",
                            object={"const": "chat.completion"}, choices={"type": "array"}),
              "text/event-stream": {"type": "string"}},
          errors=(404, 422, 429, 500, 503, 507))
async def chat_completions(request: Request) -> HTTPResponse | None:
    body = json_body(request)
    params = parse_chat(body, state_of(request).config.limits)
    params.request.session_key = session_key(request, body)
    params.request.session_yields = session_yields(body)
    return await http_turn(request, chat_lease(caller_of(request), params), params.request,
                           ChatCompletionCodec(params), stream=params.stream, n=params.n)
