"""The request log's routes (spec section 15). Open during startup staging; never logged.

With keys configured a user key reads only the records of its own requests (another key's
record is the same 404 as an unknown id); the admin key reads all, and only it changes the
level or clears the log."""
from __future__ import annotations

import re
from typing import Annotated, Literal

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service import errors
from hypnos.service.wire.body import read_body
from hypnos.service.wire.model import Says, Wire
from hypnos.service.observe.record import record_of
from hypnos.service.observe.request_log import LEVELS
from hypnos.service.http.openapi import endpoint
from hypnos.service.state import state_of

bp = Blueprint("logs")
STATUS_FILTERS = ("ok", "error", "4xx", "5xx")


LIMIT = re.compile(r"^0*[1-9][0-9]*$")        # a positive integer, as the document says


def _limit(raw: str | None) -> int | None:
    if raw is None:
        return None
    if not LIMIT.match(raw):
        raise errors.InvalidRequest(f"'limit' must be a positive integer, got {raw!r}",
                                    param="limit")
    return int(raw)


@bp.get("/v1/logs")
@endpoint("The request log, newest first", query={
    **{name: {"type": "string"} for name in ("model", "route", "key")},
    "limit": {"type": "string", "pattern": LIMIT.pattern},
    "status": {"enum": list(STATUS_FILTERS)}})
async def list_logs(request: Request) -> HTTPResponse:
    log = state_of(request).request_log
    # Blank values kept: "?limit=" is a bad limit, not an absent one (the document's pattern).
    args = request.get_args(keep_blank_values=True)
    status = args.get("status")
    if status is not None and status not in STATUS_FILTERS:
        raise errors.InvalidRequest(f"'status' must be one of {', '.join(STATUS_FILTERS)}, "
                                    f"got {status!r}", param="status")
    viewer = record_of(request)
    records = log.query(model=request.args.get("model"), route=request.args.get("route"),
                        status=status, key=request.args.get("key"),
                        limit=_limit(args.get("limit")), viewer=viewer)
    return json_response({"level": log.level, "capacity": log.capacity,
                          "stored": len(log.visible(viewer)), "records": records})


@bp.get("/v1/logs/<request_id>")
@endpoint("One request log record", errors=(404,))
async def one_log(request: Request, request_id: str) -> HTTPResponse:
    record = state_of(request).request_log.find(request_id, record_of(request))
    if record is None:
        raise errors.NotFoundError(f"No request log record {request_id!r} (the log keeps the "
                                   f"last {state_of(request).request_log.capacity})")
    return json_response(record)


@bp.delete("/v1/logs")
@endpoint("Clear the request log (every key's records)", admin=True)
async def clear_logs(request: Request) -> HTTPResponse:
    state_of(request).request_log.records.clear()
    return json_response({"cleared": True})


class LevelBody(Wire):
    level: Annotated[Literal["off", "error", "warn", "info", "debug", "trace"],
                     Says(f"'level' must be one of {', '.join(LEVELS)}, got {{got}}")]


@bp.post("/v1/logs/level")
@endpoint("Change the request log's capture level (for every key's requests)",
          body=LevelBody, admin=True)
async def set_level(request: Request) -> HTTPResponse:
    level = read_body(request, LevelBody).level
    state_of(request).request_log.level = level
    return json_response({"level": level})
