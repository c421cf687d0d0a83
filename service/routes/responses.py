"""POST /v1/responses and POST /v1/responses/input_tokens (the stored responses' routes are
`responses_stored`'s): OpenAI's Responses API (Codex CLI, the Agents SDK,
``client.responses``) on every chat model of the pool. The body is translated into a chat
request (`wire.responses`), runs as the one chat turn (`inference.turn`), and is rendered
back as output items, or streamed as the Responses event sequence (`wire.responses_out`).
Errors take OpenAI's envelope.

A stored response (``store`` true, the default) keeps its turn in the app's `ResponseStore`
(SQLite: it survives a restart); ``previous_response_id`` continues it (404 when unknown),
under the conversation's session key: bound to a slot when the engine has one to spare
(`session_plan`), else (a one-slot model) as the prompt cache's tag, so the prefix the slot
loses to other traffic comes back from the cache; with KV parking its KV survives a swap: the
next turn prefills only its new tokens.

Ownership: a stored response, its input items, its conversation's KV binding and its
continuation belong to the key that stored it; another key gets the 404 an unknown id gets,
word for word (the message never depends on whether the id exists); the admin key sees all.
An answer the store refuses (over the byte bound) is still delivered, saying ``store: false``
with the reason in ``hypnos_warnings``."""
from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines import registry
from hypnos.engines.records import ChatRequest, ChatResult
from hypnos.service.http.caller import caller_of, session_key
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.http.sink import http_turn
from hypnos.service.inference.chat_checks import chat_lease, prompt_tokens
from hypnos.service.inference.leased import LeasedCall
from hypnos.service.inference.stored_responses import (StoredResponse, bind_conversation,
                                                       previous_turn)
from hypnos.service.observe.record import record_of
from hypnos.service.state import state_of
from hypnos.service.wire.body import json_body
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.responses import (InputTokensBody, ResponsesBody, count_body,
                                           parse_body)
from hypnos.service.wire.responses_in import chat_body, to_chat_body
from hypnos.service.wire.responses_items import input_item_objects
from hypnos.service.wire.responses_out import (ResponsesCodec, assistant_message, new_id,
                                               response_object, usage)
from hypnos.service.wire.sessions import session_yields

bp = Blueprint("responses")
RESPONSE = json_object("id", "object", "status", "output", "model",
                       object={"const": "response"}, output={"type": "array"})


async def _bind_conversation(request: Request, call: LeasedCall, conversation: str,
                             chat: ChatRequest) -> None:
    """Put ``chat`` under the stored conversation's session key on the leased engine: bound
    to a slot when `session_plan` spares one, else as the prompt cache's tag only (a soft
    binding); nothing on an engine without sessions."""
    cfg = call.model.cfg
    if registry.SESSIONS not in registry.capabilities(cfg.engine, cfg.modality):
        return
    key, bound = await bind_conversation(state_of(request).responses, call.sessions,
                                         record_of(request).owner, conversation)
    chat.cache_tag, chat.session_key = key, key if bound else None


def _previous(request: Request, response_id: str | None
              ) -> tuple[StoredResponse | None, list[dict]]:
    return previous_turn(state_of(request).responses, record_of(request).owns, response_id)


class Turn:
    """One create request: its validated body, the conversation it continues, its ids."""

    def __init__(self, request: Request, body: dict) -> None:
        self.wire: ResponsesBody = parse_body(body)
        self.prev, history = _previous(request, self.wire.previous_response_id)
        chat, self.new, self.ignored = to_chat_body(self.wire, history)
        self.params = parse_chat(chat, state_of(request).config.limits)
        self.id = new_id("resp")
        self.conversation = self.prev.conversation if self.prev is not None else self.id
        self.stored = self.wire.store is not False
        self.parallel = self.wire.parallel_tool_calls is not False
        self.session = session_key(request, body)
        self.yields = session_yields(body)

    def render(self, status: str, output: list[dict],
               result: ChatResult | None = None) -> dict:
        return response_object(self.id, self.wire, status=status, output=output,
                               usage_=usage(result) if result is not None else None,
                               finish_reason=result.finish_reason if result else None,
                               ignored=self.ignored)

    def keep(self, request: Request, response: dict, items: list[dict]) -> None:
        """Store this turn (``store`` true); when the store refuses it, ``response`` says
        ``store: false`` and why in ``hypnos_warnings``."""
        if not self.stored:
            return
        prev = self.prev
        refused = state_of(request).responses.put(StoredResponse(
            self.id, record_of(request).owner, self.wire.model, self.conversation,
            prev.id if prev is not None else None, [*self.new, assistant_message(items)],
            response, input_items=input_item_objects(self.wire),
            depth=prev.depth + 1 if prev is not None else 0))
        if refused is not None:
            response["store"] = False
            response.setdefault("hypnos_warnings", []).append(f"Not stored: {refused}")


@bp.post("/v1/responses")
@needs_ready
@endpoint("OpenAI Responses: a turn as output items, stored for previous_response_id unless "
          "store is false; the Responses SSE events when stream is true", body=ResponsesBody,
          ok={**RESPONSE, "text/event-stream": {"type": "string"}},
          errors=(401, 404, 422, 429, 500, 503, 507))
async def create(request: Request) -> HTTPResponse | None:
    turn = Turn(request, json_body(request))
    params = turn.params

    async def bound(call: LeasedCall) -> ChatRequest:
        """The request, under the conversation's session when it has one to keep."""
        params.request.session_key = turn.session
        params.request.session_yields = turn.yields
        if turn.session is None and (turn.stored or turn.prev is not None):
            await _bind_conversation(request, call, turn.conversation, params.request)
        return params.request

    codec = ResponsesCodec(turn.render, turn.parallel,
                           lambda response, items: turn.keep(request, response, items))
    return await http_turn(request, chat_lease(caller_of(request), params), bound, codec,
                           stream=params.stream)


@bp.post("/v1/responses/input_tokens")
@needs_ready
@endpoint("The token count of a Responses request's input, by the model's own tokenizer and "
          "chat template (loads the model)", body=InputTokensBody,
          ok=json_object("object", "input_tokens", object={"const": "response.input_tokens"}),
          errors=(401, 404, 429, 500, 503, 507))
async def input_tokens(request: Request) -> HTTPResponse:
    wire = count_body(json_body(request))
    _prev, history = _previous(request, wire.previous_response_id)
    chat, _new, _ignored = chat_body(wire, history)
    params = parse_chat({**chat, "max_tokens": 1}, state_of(request).config.limits)
    count, headers = await prompt_tokens(caller_of(request), params)
    return json_response({"object": "response.input_tokens", "input_tokens": count},
                         headers=headers)
