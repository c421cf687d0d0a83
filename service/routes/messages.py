"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API (Claude Code,
the Anthropic SDKs) on every chat model of the pool. The body is translated into a chat
request (`wire.messages`), runs as the one chat turn (`inference.turn`), and is rendered back
as content blocks, or streamed as Anthropic's event sequence (`wire.messages_out`). Errors on
these routes take Anthropic's envelope (`errors.error_response`)."""
from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service.http.caller import caller_of
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.http.sink import http_turn
from hypnos.service.inference.chat_checks import chat_lease, prompt_tokens
from hypnos.service.state import state_of
from hypnos.service.wire.body import json_body
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.messages import (CountTokensBody, MessagesBody, count_body,
                                          marked_chat_messages, to_chat_body)
from hypnos.service.wire.messages_out import MessagesCodec

bp = Blueprint("messages")


@bp.post("/v1/messages")
@needs_ready
@endpoint("Anthropic Messages: a chat turn as content blocks; Anthropic's SSE events when "
          "stream is true", body=MessagesBody,
          ok={**json_object("id", "type", "role", "content", "stop_reason", "usage",
                            type={"const": "message"}, content={"type": "array"}),
              "text/event-stream": {"type": "string"}},
          errors=(401, 404, 422, 429, 500, 503, 507))
async def messages(request: Request) -> HTTPResponse | None:
    wire, chat = to_chat_body(json_body(request))
    params = parse_chat(chat, state_of(request).config.limits)
    params.request.cache_marks = marked_chat_messages(wire)[1]
    single = bool(wire.tool_choice and wire.tool_choice.disable_parallel_tool_use)
    codec = MessagesCodec(params.model, single, lambda: params.prompt_tokens)
    return await http_turn(request, chat_lease(caller_of(request), params), params.request, codec,
                           stream=params.stream)


@bp.post("/v1/messages/count_tokens")
@needs_ready
@endpoint("Anthropic's token count of a Messages request, by the model's own tokenizer and "
          "chat template (loads the model)", body=CountTokensBody,
          ok=json_object("input_tokens"), errors=(401, 404, 429, 500, 503, 507))
async def count_tokens(request: Request) -> HTTPResponse:
    params = parse_chat(count_body(json_body(request)), state_of(request).config.limits)
    count, headers = await prompt_tokens(caller_of(request), params)
    return json_response({"input_tokens": count}, headers=headers)
