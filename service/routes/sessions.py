"""Sessions (Pantheon's session routes, under /v1/sessions): a conversation bound to a chat
slot by ``session_id`` can be exported as a blob, restored, released, estimated and watched.

A session belongs to the key that names it (`wire.sessions`): each key, the admin's
included, reaches only its own sessions by name; with no keys there is one namespace.

Paths: POST /v1/sessions/export, POST /v1/sessions/restore, POST /v1/sessions/release,
GET /v1/sessions/estimate, GET /v1/sessions/watch (Pantheon's /admin/session/export and
/session/* moved under /v1 so they share the API's auth, CORS and error envelope).
"""
from __future__ import annotations

import asyncio
import base64
import re
import binascii
from typing import Annotated, TypeVar

from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service import errors
from hypnos.service.inference import sessions
from hypnos.service.http.caller import session_key
from hypnos.service.wire.sessions import session_name
from hypnos.service.wire.body import read_body
from hypnos.service.wire.model import Wire
from hypnos.service.http.openapi import endpoint, needs_ready
from hypnos.service.state import state_of
from hypnos.service.scheduling.pool import ModelState

bp = Blueprint("sessions")
DEFAULT_PREFILL_TPS = 500.0          # before a prefill was measured
DEFAULT_UPLOAD_BPS = 12.5e6
BLOB_BYTES_PER_TOKEN = 16 * 1024
WATCH_KEEPALIVE_SECS = 15.0


def _chat_model(request: Request, model_id: object) -> ModelState:
    return sessions.session_model(state_of(request).scheduler, model_id)


def _require_key(request: Request, body: dict | None) -> tuple[str, str]:
    """(the session's name as the client gave it, its engine key)."""
    name, key = session_name(request, body), session_key(request, body)
    if name is None or key is None:
        raise errors.InvalidRequest("'session_id' is required", param="session_id")
    return name, key


class SessionBody(Wire):
    """The session is named by session_id, prompt_cache_key or promptCacheKey here, or the
    X-Session-Id header; restore also takes the exported ``blob`` (base64)."""
    model: Annotated[str, Field(min_length=1)]
    session_id: str | None = None
    prompt_cache_key: str | None = None
    promptCacheKey: str | None = None


class RestoreBody(SessionBody):
    blob: str | None = None
    blob_b64: str | None = None


@bp.post("/v1/sessions/export")
@needs_ready
@endpoint("Export a chat session's KV state", body=SessionBody, errors=(404, 429, 503))
async def export(request: Request) -> HTTPResponse:
    body = read_body(request, SessionBody)
    st = _chat_model(request, body.model)
    name, key = _require_key(request, body.model_dump())
    blob, n_tok = await sessions.export(state_of(request).scheduler, st, key, name)
    return json_response({"session_id": name, "model": st.id, "n_tok": n_tok,
                          "blob_bytes": len(blob),
                          "blob_b64": base64.b64encode(blob).decode("ascii")})


@bp.post("/v1/sessions/restore")
@needs_ready
@endpoint("Restore an exported session", body=RestoreBody,
          errors=(404, 409, 429, 500, 503, 507))
async def restore(request: Request) -> HTTPResponse:
    body = read_body(request, RestoreBody)
    st = _chat_model(request, body.model)
    name, key = _require_key(request, body.model_dump())
    raw = body.blob or body.blob_b64
    if not isinstance(raw, str) or not raw:
        raise errors.InvalidRequest("'blob' (base64) is required", param="blob")
    try:
        blob = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise errors.BadSessionBlob("'blob' is not valid base64") from None
    n_tok = await sessions.restore(state_of(request).scheduler, st, key, blob)
    return json_response({"restored": True, "session_id": name, "model": st.id,
                          "n_tok": n_tok})


@bp.post("/v1/sessions/release")
@endpoint("Release a session's slot", body=SessionBody, errors=(404, 503))
async def release(request: Request) -> HTTPResponse:
    body = read_body(request, SessionBody)
    st = _chat_model(request, body.model)
    name, key = _require_key(request, body.model_dump())
    await sessions.release(state_of(request).scheduler, st, key)
    return json_response({"released": True, "session_id": name, "model": st.id})


# A positive decimal number (no sign, no exponent): what the document's query parameters say
# and what `_positive` accepts.
POSITIVE = re.compile(r"^0*[1-9][0-9]*(\.[0-9]*)?$|^0*\.[0-9]*[1-9][0-9]*$")


D = TypeVar("D", bound=float | None)    # a parameter's default: a number, or None


def _positive(request: Request, name: str, default: D) -> float | D:
    raw = request.get_args(keep_blank_values=True).get(name)    # "?tokens=" is not a number
    if raw is None:
        return default
    if not POSITIVE.match(raw):
        raise errors.InvalidRequest(f"'{name}' must be a positive number", param=name)
    return float(raw)


@bp.get("/v1/sessions/estimate")
@endpoint("Estimate the cost of moving a session", errors=(404,), query={
    "model": {"type": "string"},
    **{name: {"type": "string", "pattern": POSITIVE.pattern}
       for name in ("tokens", "blob_bytes", "upload_bps")}},
    required_query=("tokens",))
async def estimate(request: Request) -> HTTPResponse:
    tokens = _positive(request, "tokens", None)
    if tokens is None:
        raise errors.InvalidRequest("'tokens' is required", param="tokens")
    model_id = request.args.get("model") or request.args.get("name") or ""
    st = state_of(request).scheduler.models.get(model_id)
    rate = (st.stats.prefill_tps if st is not None and st.stats.prefill_tps else
            DEFAULT_PREFILL_TPS)
    blob = _positive(request, "blob_bytes", tokens * BLOB_BYTES_PER_TOKEN)
    upload = _positive(request, "upload_bps", DEFAULT_UPLOAD_BPS)
    restore_ms = 1000 * blob / upload
    reprefill_ms = 1000 * tokens / rate
    return json_response({
        "model": model_id if st is not None else "", "tokens": int(tokens),
        "blob_bytes": int(blob), "upload_bps": upload, "prefill_tok_per_s": round(rate, 1),
        "restore_ms": round(restore_ms, 1), "reprefill_ms": round(reprefill_ms, 1),
        "recommend": "restore" if restore_ms < reprefill_ms else "reprefill"})


@bp.get("/v1/sessions/watch")
@needs_ready
@endpoint("Server-sent events about a session", errors=(404, 503),
          ok={"text/event-stream": {"type": "string"}},
          query={"model": {"type": "string", "minLength": 1},
                 "session_id": {"type": "string", "minLength": 1}},
          required_query=("session_id", "model"))
async def watch(request: Request) -> HTTPResponse | None:
    """Holds the model resident (it is not evicted, so the session's KV stays) for as long as
    the connection is open."""
    key = session_key(request, {k: request.args.get(k) for k in request.args})
    if key is None:
        raise errors.InvalidRequest("'session_id' is required", param="session_id")
    st = _chat_model(request, request.args.get("model") or request.args.get("name"))
    async with state_of(request).scheduler.hold(st.id):
        response = await request.respond(content_type="text/event-stream",
                                         headers={"cache-control": "no-cache"})
        await response.send(": watch established\n\n")
        while True:
            await asyncio.sleep(WATCH_KEEPALIVE_SECS)
            await response.send(": keep-alive\n\n")
