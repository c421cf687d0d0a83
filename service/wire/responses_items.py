"""GET /v1/responses/{id}/input_items: a stored response's own input (not the conversation
before it, nor its instructions) as OpenAI's input item objects, and the page of them a
query asks for (OpenAI's list shape: ``object``, ``data``, ``first_id``, ``last_id``,
``has_more``). Pure."""
from __future__ import annotations

from hypnos.service.errors import InvalidRequest
from hypnos.service.wire.responses import InputFields, MessageItem
from hypnos.service.wire.responses_out import new_id

ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco",
               "reasoning": "rs", "custom_tool_call": "ctc", "custom_tool_call_output": "ctco"}
MAX_LIMIT = 100
DEFAULT_LIMIT = 20


def _message(role: str, text: str) -> list[dict]:
    return [{"type": "output_text" if role == "assistant" else "input_text", "text": text}]


def input_item_objects(wire: InputFields) -> list[dict]:
    """The request's ``input`` as item objects: each as sent (its extra fields kept), with
    an ``id`` (the client's, or a new one), a ``status``, and a message's string content
    as one text part."""
    if wire.input is None:
        return []
    if isinstance(wire.input, str):
        return [{"id": new_id("msg"), "type": "message", "role": "user",
                 "status": "completed", "content": _message("user", wire.input)}]
    out = []
    for item in wire.input:
        d = item.model_dump(by_alias=True, exclude_none=True)
        if isinstance(item, MessageItem) and isinstance(item.content, str):
            d["content"] = _message(item.role, item.content)
        d.setdefault("status", "completed")
        out.append({"id": d.pop("id", None) or new_id(ID_PREFIXES[d["type"]]), **d})
    return out


def page_query(args) -> tuple[int, str, str | None]:
    """(limit, order, after) from the query string (Sanic's ``request.args``); 400 for a
    limit outside 1..100 or an order other than asc or desc."""
    raw = args.get("limit")
    try:
        limit = DEFAULT_LIMIT if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_LIMIT}, got {raw!r}",
                             param="limit")
    order = args.get("order") or "desc"
    if order not in ("asc", "desc"):
        raise InvalidRequest(f"'order' must be asc or desc, got {order!r}", param="order")
    return limit, order, args.get("after") or None


def item_page(items: list[dict], limit: int, order: str, after: str | None) -> dict:
    """The page of ``items`` (oldest first) in ``order`` that follows the item ``after``
    (400 when it is not one of them), at most ``limit`` long."""
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [i["id"] for i in ordered]
        if after not in ids:
            raise InvalidRequest(f"'after' is {after!r}, which is not an input item of this "
                                 "response", param="after")
        start = ids.index(after) + 1
    data = ordered[start:start + limit]
    return {"object": "list", "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": start + limit < len(ordered)}
