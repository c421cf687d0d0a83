"""GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: the responses
/v1/responses stored (`inference.stored_responses.ResponseStore`). A stored response belongs
to the key that stored it; another key gets the 404 an unknown id gets, word for word; the
admin key sees all."""
from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service import errors
from hypnos.service.http.openapi import endpoint, json_object
from hypnos.service.inference.stored_responses import SESSION_PREFIX, StoredResponse
from hypnos.service.observe.record import record_of
from hypnos.service.state import state_of
from hypnos.service.wire.responses_items import item_page, page_query
from hypnos.service.wire.sessions import owned_session

bp = Blueprint("responses_stored")
RESPONSE = json_object("id", "object", "status", "output", "model",
                       object={"const": "response"}, output={"type": "array"})


def _stored(request: Request, response_id: str) -> StoredResponse:
    """The response, or a 404 that reads the same whether the id is unknown or another
    key's."""
    item = state_of(request).responses.visible(response_id, record_of(request).owns)
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
    item = _stored(request, response_id)
    state_of(request).responses.delete(response_id)
    cache = state_of(request).scheduler.prompt_cache
    if cache is not None:       # the conversation's cached prefixes go with it
        cache.drop_session(owned_session(item.owner, SESSION_PREFIX + item.conversation))
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
