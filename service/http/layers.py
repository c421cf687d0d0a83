"""Cross-cutting HTTP layers: request id, browser safety (http/browser.py), CORS, API keys,
the route gate (admin keys and readiness, from each route's ``@endpoint``), latency. The
body readers (json_body, read_body, deadline_ms) are wire/body.py."""
from __future__ import annotations

import secrets
import time

from sanic import Request, Sanic
from sanic.exceptions import PayloadTooLarge
from sanic.response import empty

from hypnos.service.http import browser
from hypnos.service import errors
from hypnos.service.http.openapi import UNVERSIONED, endpoint_of, keyed
from hypnos.service.scheduling.readiness import Readiness
from hypnos.service.observe.record import (RequestRecord, open_record, opened_record,
                                           record_of)
from hypnos.service.state import state_of

EXPOSED = ("x-request-id, x-hypnos-previous-tier, x-hypnos-gpu-layers, x-hypnos-switch-ms, "
           "x-hypnos-inference-ms, x-hypnos-audio-secs, x-hypnos-rtf, "
           "x-hypnos-estimated-wait-ms")
OPEN_PATHS = ("/health", "/ready")
MCP_PATH = "/mcp"           # the MCP endpoint (routes/mcp.py): keyed as /v1 is


def new_request_id() -> str:
    return "req-" + secrets.token_hex(16)


def _cors_headers(request: Request) -> dict:
    origin = request.headers.get("origin")
    if not origin or not browser.origin_listed(origin,
                                               state_of(request).config.server.allowed_origins):
        return {}
    return {"access-control-allow-origin": origin, "vary": "Origin",
            "access-control-allow-methods": "GET, POST, OPTIONS",
            "access-control-allow-headers": request.headers.get(
                "access-control-request-headers",
                "authorization, content-type, x-hypnos-deadline-ms, x-hypnos-next-model, "
                "x-hypnos-workflow, x-hypnos-workflow-end"),
            "access-control-expose-headers": EXPOSED,
            "access-control-max-age": "600"}


def _check_key(request: Request) -> None:
    """Match the bearer key (401) and admit it against its limits (429); the permit is
    released by `after_handler` once the response's last byte went out."""
    ring = state_of(request).keys
    cfg = state_of(request).config.server
    path = request.path
    if not ring.enabled or path in OPEN_PATHS or not (
            keyed(path) or path == MCP_PATH or (
            path == "/metrics" and cfg.metrics_require_auth)):
        return
    header = request.headers.get("authorization", "").strip()
    if not header and request.headers.get("x-api-key"):
        # Anthropic's clients send the key as x-api-key: the same keys and limits.
        header = "Bearer " + request.headers["x-api-key"].strip()
    if not header and (key := subprotocol_key(request)):
        header = "Bearer " + key
    scheme, _, token = header.partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="hypnos"'}
    if not header:
        raise errors.Unauthorized("Missing API key. Send it as `Authorization: Bearer <key>` "
                                  "(server.api_keys).", headers=challenge)
    key = ring.match(token.strip()) if scheme.lower() == "bearer" else None
    if key is None:
        raise errors.Unauthorized("Invalid API key.", headers=challenge)
    record = record_of(request)
    record.api_key = key
    record.permit = state_of(request).limiter.admit(key)


SUBPROTOCOL_KEY = "openai-insecure-api-key."


def subprotocol_key(request: Request) -> str | None:
    """The key a browser's WebSocket sends as a subprotocol (it cannot set Authorization):
    ``Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.<key>``, as OpenAI's clients
    do."""
    for proto in request.headers.get("sec-websocket-protocol", "").split(","):
        proto = proto.strip()
        if proto.startswith(SUBPROTOCOL_KEY) and len(proto) > len(SUBPROTOCOL_KEY):
            return proto[len(SUBPROTOCOL_KEY):]
    return None


def require_admin(request: Request) -> None:
    """An ``admin`` route (pool changes, the request log's level and clearing) needs an
    admin key when keys are configured (403)."""
    key = record_of(request).api_key
    if state_of(request).keys.enabled and (key is None or not key.admin):
        raise errors.PermissionDenied(
            f"{request.method} {request.path} needs an admin key (a server.api_keys entry, "
            "or a [[server.keys]] entry with admin = true)")


def install_http_layers(app: Sanic) -> None:
    own_names = browser.machine_names()

    @app.on_request(priority=100)
    async def _start(request: Request):
        open_record(request, RequestRecord(new_request_id(), time.monotonic()))
        browser.check_browser(request, own_names)     # 403 before any work (http/browser.py)
        if request.method == "OPTIONS":
            return empty(204, headers=_cors_headers(request))
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > request.app.config.REQUEST_MAX_SIZE:
            raise PayloadTooLarge("Payload Too Large")
        _check_key(request)
        await before_handler(request)

    # After the blueprints' own request middleware (priority 0).
    @app.on_request(priority=-10)
    async def _gate(request: Request):
        route_gate(request)

    @app.on_response(priority=100)
    async def _finish(request: Request, response):
        record = opened_record(request)
        response.headers["x-request-id"] = record.request_id if record else new_request_id()
        for k, v in _cors_headers(request).items():
            response.headers.setdefault(k, v)
        if record is not None:
            record.status = response.status
            # None for a stream (request.respond()): its body was never held in one piece.
            record.response_body = getattr(response, "body", None)


async def before_handler(request: Request) -> None:
    """Per request, before the handler: workflow bookkeeping and next-stage prefetch."""
    app = state_of(request)
    record = record_of(request)
    key = record.workflow = app.workflows.parse(request.headers.get("x-hypnos-workflow"))
    if key is not None:
        app.workflows.begin(key, record.started)
    nxt = request.headers.get("x-hypnos-next-model")
    if nxt and app.lifecycle.ready:
        app.scheduler.prefetch(nxt)


def after_handler(request: Request) -> None:
    """Once the handler finished (streams: after the last byte): the key's permit and tokens,
    latency per route and the workflow's last byte."""
    record = opened_record(request)
    if record is None:
        return
    now = time.monotonic()
    if record.permit is not None:
        state_of(request).limiter.release(record.permit, record.tokens)
    if request.route is not None:
        route = "/" + request.route.path.lstrip("/")
        ms = (now - record.started) * 1000
        state_of(request).latency.record(route, ms)
        state_of(request).metrics.request_done(record, route, ms)
        if _logged(request):
            state_of(request).request_log.observe(request, record, route, ms)
    key = record.workflow
    if key is not None:
        close = request.headers.get("x-hypnos-workflow-end", "").lower() in ("true", "1", "yes")
        state_of(request).workflows.end(key, now, close)


def _logged(request: Request) -> bool:
    """Inference and pool calls go to the request log; polling (GET, the log routes) not."""
    path = request.path
    if path == MCP_PATH:         # a tool call that used a model, not a listing
        record = opened_record(request)
        return record is not None and record.lease is not None
    return ((path.startswith("/v1/") or path in UNVERSIONED) and not path.startswith("/v1/logs")
            and request.method not in ("GET", "HEAD", "OPTIONS"))


def not_ready(readiness: Readiness) -> errors.HypnosError | None:
    """What a ``needs_ready`` route answers in ``readiness``: a 503 + Retry-After while
    startup staging runs and once a SIGTERM started the drain (lifecycle/shutdown.py)."""
    if readiness is Readiness.DRAINING:
        return errors.ModelNotAvailable("Hypnos is shutting down and admits no new requests; "
                                        "retry against its replacement",
                                        headers={"Retry-After": "5"})
    if readiness is Readiness.STARTING:
        return errors.staging_error()
    return None


def route_gate(request: Request) -> None:
    """What the route's `Endpoint` requires before its handler runs, in this order: an admin
    key (``admin``, 403), then a READY server (``needs_ready``, 503). The one place either is
    enforced."""
    spec = endpoint_of(request.route.handler) if request.route is not None else None
    if spec is None:
        return
    if spec.admin:
        require_admin(request)
    if spec.needs_ready and (refusal := not_ready(state_of(request).lifecycle.readiness)):
        raise refusal

