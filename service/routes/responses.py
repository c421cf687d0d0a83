"""POST /v1/responses, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items,
POST /v1/responses/input_tokens:
OpenAI's Responses API (Codex CLI, the Agents SDK, ``client.responses``) on every chat model of
the pool. The body is translated into a chat request (`wire.responses`), runs under the chat
path's one lease, and is rendered back as output items, or streamed as the Responses event
sequence (`wire.responses_out`). Errors take OpenAI's envelope.

A stored response (``store`` true, the default) keeps its turn in the app's `ResponseStore`
(SQLite: it survives a restart); ``previous_response_id`` continues it (404 when unknown),
under the conversation's session key when the engine has a slot to spare (`session_plan`), and
with KV parking its KV survives a swap: the next turn prefills only its new tokens.

Ownership: a stored response, its input items, its conversation's KV binding and its
continuation belong to the key that stored it; another key gets the 404 an unknown id gets,
word for word (the message never depends on whether the id exists); the admin key sees all.
An answer the store refuses (over the byte bound) is still delivered, saying ``store: false``
with the reason in ``hypnos_warnings``."""
from __future__ import annotations

import asyncio

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines import registry
from hypnos.service import errors
from hypnos.service.http.caller import caller_of, session_key
from hypnos.service.wire.body import json_body
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.inference.chat_checks import chat_lease, prompt_tokens
from hypnos.service.inference.stored_responses import (MAX_DEPTH, SESSION_PREFIX, MissingTurn,
                                                       StoredResponse, session_plan)
from hypnos.service.inference.text import (record, run_choices, stream_choices,
                                           text_telemetry)
from hypnos.service.observe.record import record_of
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.responses import (InputTokensBody, ResponsesBody, count_body,
                                           parse_body)
from hypnos.service.wire.responses_in import chat_body, to_chat_body
from hypnos.service.wire.responses_items import input_item_objects, item_page, page_query
from hypnos.service.wire.responses_out import (EventStream, assistant_message, new_id,
                                               output_items, response_object, usage)
from hypnos.service.wire.sessions import owned_session
from hypnos.service.state import state_of
from hypnos.service.inference.leased import LeasedCall
from hypnos.engines.records import ChatDelta, ChatResult

bp = Blueprint("responses")
RESPONSE = json_object("id", "object", "status", "output", "model",
                       object={"const": "response"}, output={"type": "array"})


def _owned(request: Request, response_id: str) -> StoredResponse | None:
    """The stored response if this request's key may see it (its owner's, or the admin);
    None otherwise, exactly as for an id never stored."""
    item = state_of(request).responses.get(response_id)
    return item if item is not None and record_of(request).owns(item.owner) else None


def _previous(request: Request, response_id: str | None) -> tuple[StoredResponse | None,
                                                                   list[dict]]:
    """The response ``previous_response_id`` names and the conversation through it (chat
    messages); 404 when it is not this key's to see, or an earlier turn is gone."""
    if response_id is None:
        return None, []
    item = _owned(request, response_id)
    if item is None:
        raise errors.NotFoundError(f"Previous response with id {response_id!r} not found "
                                   "(never stored, deleted, or dropped from the store)",
                                   param="previous_response_id",
                                   code="previous_response_not_found")
    if item.depth + 1 >= MAX_DEPTH:
        raise errors.InvalidRequest(f"The conversation of {response_id!r} is {MAX_DEPTH} turns "
                                    "long, the most a chain may hold; start a new one",
                                    param="previous_response_id")
    try:
        return item, state_of(request).responses.conversation(item)
    except MissingTurn as gone:
        raise errors.NotFoundError(
            f"Previous response {response_id!r} continues {gone.missing!r}, which is no "
            "longer stored (deleted, expired, or dropped past the store's bounds), so its "
            "conversation cannot be rebuilt; start a new one", param="previous_response_id",
            code="previous_response_not_found") from None


def _conversation_key(request: Request, conversation: str) -> str:
    """The engine session key of a stored conversation, in the requesting key's namespace."""
    return owned_session(record_of(request).owner, SESSION_PREFIX + conversation)


async def _bind_conversation(request: Request, call: LeasedCall,
                             conversation: str) -> str | None:
    """The stored conversation's session key on this engine, or None (`session_plan`)."""
    cfg = call.model.cfg
    if registry.SESSIONS not in registry.capabilities(cfg.engine, cfg.modality):
        return None
    engine, key = call.sessions, _conversation_key(request, conversation)
    recency = {owned_session(owner, SESSION_PREFIX + conv): rank
               for (owner, conv), rank in state_of(request).responses.recency().items()}

    def plan() -> bool:
        bind, release = session_plan(engine.sessions(), engine.max_sessions, key, recency)
        for old in release:
            engine.release_session(old)
        return bind
    return key if await asyncio.to_thread(plan) else None


class Turn:
    """One create request: its validated body, the conversation it continues, its ids."""

    def __init__(self, request: Request, body: dict):
        self.wire: ResponsesBody = parse_body(body)
        self.prev, history = _previous(request, self.wire.previous_response_id)
        chat, self.new, self.ignored = to_chat_body(self.wire, history)
        self.params = parse_chat(chat, state_of(request).config.limits)
        self.id = new_id("resp")
        self.conversation = self.prev.conversation if self.prev is not None else self.id
        self.stored = self.wire.store is not False
        self.parallel = self.wire.parallel_tool_calls is not False
        self.session = session_key(request, body)

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
    async with chat_lease(caller_of(request), params) as call:
        params.request.session_key = turn.session or (
            await _bind_conversation(request, call, turn.conversation)
            if turn.stored or turn.prev is not None else None)
        if params.stream:
            return await _stream(request, turn, call)
        (result,) = await run_choices(call, [params.request])
        record(caller_of(request), call, [result])
        items = output_items(result, turn.parallel)
        out = turn.render("completed", items, result)
        out["hypnos_telemetry"] = text_telemetry(call, [result])
        turn.keep(request, out, items)
        return json_response(out, headers=call.wait_headers())


async def _stream(request: Request, turn: Turn, call: LeasedCall) -> HTTPResponse | None:
    response = await request.respond(content_type="text/event-stream",
                                     headers={"cache-control": "no-cache",
                                              **call.wait_headers()})
    events = EventStream(response.send, turn.parallel)
    start = turn.render("in_progress", [])
    await events.lifecycle("response.created", start)
    await events.lifecycle("response.in_progress", start)

    async def send_delta(_index: int, d: ChatDelta) -> None:
        await events.feed(d)

    try:
        (result,) = await stream_choices(call, [turn.params.request], send_delta,
                                         lambda: response.send(": keep-alive\n\n"))
    except errors.HypnosError as exc:
        failed = turn.render("failed", events.items)
        failed["error"] = {"code": exc.type, "message": exc.message}
        await events.lifecycle("response.failed", failed)
        await response.eof()
        return None
    record(caller_of(request), call, [result])
    items = await events.finish()
    final = turn.render("completed", items, result)
    final["hypnos_telemetry"] = text_telemetry(call, [result])
    turn.keep(request, final, items)
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    await events.lifecycle(kind, final)
    await response.eof()
    return None


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


def _stored(request: Request, response_id: str) -> StoredResponse:
    """The response, or a 404 that reads the same whether the id is unknown or another
    key's."""
    item = _owned(request, response_id)
    if item is None:
        raise errors.NotFoundError(f"No stored response with id {response_id!r}",
                                   param="response_id", code="response_not_found")
    return item


@bp.get("/v1/responses/<response_id>")
@endpoint("A stored response", ok=RESPONSE, errors=(401, 404))
async def get_response(request: Request, response_id: str) -> HTTPResponse:
    return json_response(_stored(request, response_id).response)


@bp.delete("/v1/responses/<response_id>")
@endpoint("Delete a stored response (a conversation continued from it can no longer be)",
          ok=json_object("id", "object", "deleted"), errors=(401, 404))
async def delete_response(request: Request, response_id: str) -> HTTPResponse:
    _stored(request, response_id)
    state_of(request).responses.delete(response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


@bp.get("/v1/responses/<response_id>/input_items")
@endpoint("A stored response's own input items, a page at a time (newest first unless "
          "order is asc)", ok=json_object("object", "data", "first_id", "last_id", "has_more",
                                          object={"const": "list"}, data={"type": "array"}),
          errors=(401, 404), query={"limit": {"type": "integer", "minimum": 1, "maximum": 100},
                                    "order": {"type": "string", "enum": ["asc", "desc"]},
                                    "after": {"type": "string"}})
async def input_items(request: Request, response_id: str) -> HTTPResponse:
    limit, order, after = page_query(request.args)
    item = _stored(request, response_id)
    return json_response(item_page(item.input_items, limit, order, after))
