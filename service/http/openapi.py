"""GET /openapi.json: an OpenAPI 3.1 document built from the routes themselves.

Every handler carries an `Endpoint`, declared next to it with ``@endpoint(...)``: a summary,
its JSON body's pydantic model (service/wire/model.py) or a multipart form's JSON Schema, its
query parameters, what it answers on success and the error statuses it can answer. A JSON
body's schema is the one its model emits (`body_schema`: $defs inlined, an optional field
nullable), and the route validates the body with that same model (`read_body` /
`wire.model.validate`), so the document states what the server enforces: a body the document
calls invalid is a 400 naming the field (tests/http/test_wire_models.py).
`document(app)` walks the app's router, so a route without an Endpoint is missing from the
document and tests/http/test_openapi.py says which.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from sanic import Sanic

from hypnos.service.wire.model import body_schema

ATTR = "__hypnos_endpoint__"
ENVELOPE = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
# The envelopes of the other dialects' routes (errors.error_response).
ANTHROPIC_ENVELOPE = {"type": "object", "required": ["type", "error"], "properties": {
    "type": {"const": "error"}, "error": {
        "type": "object", "required": ["type", "message"], "properties": {
            "type": {"type": "string"}, "message": {"type": "string"}}}}}
OLLAMA_ENVELOPE = {"type": "object", "required": ["error"],
                   "properties": {"error": {"type": "string"}}}
PLAIN = {"text/plain": {"schema": {"type": "string"}}}


def envelope_for(path: str) -> dict:
    """The error body a route answers: OpenAI's, Anthropic's on /v1/messages, Ollama's on
    /api/*."""
    if path.startswith("/v1/messages"):
        return ANTHROPIC_ENVELOPE
    if path.startswith("/api/"):
        return OLLAMA_ENVELOPE
    return ENVELOPE
# Statuses every route can answer without saying so: keys and their quotas (401, 429) on
# /v1, and on a body the body-limit layer (413) and request_timeout_secs (408), both plain
# text (spec section 4).
TEXT_STATUSES = {408: "request_timeout_secs elapsed", 413: "body above max_body_bytes"}
# Every route answers 403 to a refused browser Origin or Host (http/browser.py); an admin
# route also to a key that is not an admin key.
BROWSER_403 = "a browser origin or Host header this server does not answer"
DESCRIPTIONS = {400: "malformed request", 401: "missing or unknown API key",
                403: BROWSER_403, 404: "unknown model or resource",
                409: "session made for other weights", 422: "prompt past the context window",
                429: "queue full or rate limited", 500: "engine failure",
                503: "not available or staging", 507: "does not fit in memory"}
ANY_OBJECT = {"type": "object"}
DESCRIPTION = (
    "Local inference server: OpenAI-compatible routes plus model pool and memory-tier "
    "control.\n\n"
    "Browsers and host names: every operation, WebSocket upgrades and CORS preflights "
    "included, answers 403 `permission_denied` before doing anything when the request's "
    "`Origin` header is not a loopback page (http or https on localhost, 127.0.0.0/8 or "
    "::1, any port), not the server's own page (the origin's host and port equal the "
    "request's `Host`) and not listed in `server.allowed_origins` (`\"*\"` for any, "
    "`\"http://host:*\"` for any port; `Origin: null` only when `\"null\"` is listed); or "
    "when its `Host` header is not a loopback name, not one of the machine's names or "
    "addresses, not `server.host` and not listed in `server.allowed_hosts` (`\"*\"` for "
    "any; ports are ignored). A request without `Origin` (curl, the SDKs) or without "
    "`Host` passes both checks.")


def json_object(*required: str, **properties) -> dict:
    """A success body's schema: an object with these keys (more may come)."""
    return {"application/json": {"type": "object", "required": list(required),
                                 "properties": properties}}


#: Inference paths outside /v1 and /api/: llama-server's and Cohere's names for rerank.
UNVERSIONED = ("/rerank", "/v2/rerank")


def keyed(path: str) -> bool:
    """Whether API keys (401) and their limits (429) apply to ``path``."""
    return path.startswith(("/v1", "/api/")) or path in UNVERSIONED


# What a route that leases a model can answer besides a 400 (spec section 4).
INFERENCE_ERRORS = (404, 429, 500, 503, 507)


@dataclass(frozen=True)
class Endpoint:
    summary: str
    body: type[BaseModel] | None = None  # the JSON body's model (service/wire/model.py)
    form: dict | None = None             # JSON Schema of a multipart/form-data body
    query: dict = field(default_factory=dict)   # name -> schema
    required_query: tuple[str, ...] = ()
    ok: dict = field(default_factory=lambda: {"application/json": ANY_OBJECT})
    status: int = 200                    # the success status (201: a thing was created)
    errors: tuple[int, ...] = ()
    # What a status means on this route, where DESCRIPTIONS' general words are wrong.
    meanings: dict[int, str] = field(default_factory=dict)
    websocket: bool = False
    # Statuses whose body is not the error envelope: status -> JSON Schema (None: no body).
    other: dict = field(default_factory=dict)
    # What the route gate (http/layers.route_gate) requires before the handler runs: an
    # admin key when keys are configured (403), a READY server (503 + Retry-After).
    admin: bool = False
    needs_ready: bool = False


H = TypeVar("H", bound=Callable[..., Any])


def endpoint(summary: str, **kw: Any) -> Callable[[H], H]:
    """Declare a handler's contract; put it under the ``@bp.<method>(path)`` line."""
    spec = Endpoint(summary, **kw)

    def mark(handler: H) -> H:
        setattr(handler, ATTR, spec)
        return handler
    return mark


def needs_ready(handler: H) -> H:
    """The route answers 503 + Retry-After while the server is not READY (staging, drain).
    Put it between ``@bp.<method>(path)`` and ``@endpoint(...)``."""
    return _amend(handler, needs_ready=True)


def admin_only(handler: H) -> H:
    """The route needs an admin key when keys are configured (403). Put it between
    ``@bp.<method>(path)`` and ``@endpoint(...)``."""
    return _amend(handler, admin=True)


def _amend(handler: H, **flags: bool) -> H:
    spec = getattr(handler, ATTR, None)
    if spec is None:
        raise TypeError(f"{handler.__qualname__}: put @endpoint(...) below this decorator")
    setattr(handler, ATTR, dataclasses.replace(spec, **flags))
    return handler


def endpoint_of(handler) -> Endpoint | None:
    """The handler's Endpoint; Sanic registers a WebSocket handler inside a partial."""
    if isinstance(handler, functools.partial):
        return next(filter(None, (getattr(a, ATTR, None) for a in handler.args)), None)
    return getattr(handler, ATTR, None)


# ------------------------------------------------------------------ the document

def _meaning(spec: Endpoint, status: int) -> str:
    meaning = spec.meanings.get(status) or (
        "not an admin key" if status == 403 and spec.admin else DESCRIPTIONS.get(status, "error"))
    if status == 403 and BROWSER_403 not in meaning:
        meaning += ", or " + BROWSER_403
    return meaning


def _operation(path: str, method: str, spec: Endpoint, params: list[str]) -> dict:
    op: dict = {"summary": spec.summary,
                "operationId": method + re.sub(r"\W+", "_", path).rstrip("_")}
    parameters = [{"name": name, "in": "path", "required": True,
                   "schema": {"type": "integer" if kind == "int" else "string"}}
                  for name, kind in params]
    parameters += [{"name": name, "in": "query", "required": name in spec.required_query,
                    "schema": schema} for name, schema in spec.query.items()]
    if parameters:
        op["parameters"] = parameters
    content = {}
    if spec.body is not None:
        content["application/json"] = {"schema": body_schema(spec.body)}
    if spec.form is not None:
        content["multipart/form-data"] = {"schema": spec.form}
    if content:
        op["requestBody"] = {"required": True, "content": content}
    responses: dict = {"101" if spec.websocket else str(spec.status): {
        "description": "WebSocket session" if spec.websocket else "success",
        **({"content": {k: {"schema": v} for k, v in spec.ok.items()}} if spec.ok else {})}}
    checked = content or spec.query or spec.websocket     # anything parsed can be a 400
    statuses = set(spec.errors) | ({400} if checked else set()) | {403} | \
        ({401, 429} if keyed(path) else set()) | \
        ({503} if spec.needs_ready else set())
    envelope = envelope_for(path)
    for status in sorted(statuses | set(spec.other)):
        meaning = _meaning(spec, status)
        schema = spec.other.get(status, envelope)
        responses[str(status)] = {"description": meaning} if schema is None else {
            "description": meaning, "content": {"application/json": {"schema": schema}}}
    if content:
        for status, text in TEXT_STATUSES.items():
            responses[str(status)] = {"description": text, "content": PLAIN}
        if spec.form is not None:   # multipart uploads get the JSON 413 (spec section 4)
            responses["413"]["content"] = {**PLAIN, "application/json": {"schema": envelope}}
    op["responses"] = responses
    return op


@functools.cache
def hypnos_version() -> str:
    """The installed package's version, read once (it reads package metadata from disk, and
    /health asks on every probe)."""
    try:
        return version("hypnos")
    except PackageNotFoundError:
        return "0.0.0"


def document(app: Sanic) -> dict:
    """The OpenAPI 3.1 document of every route ``app`` has that declares an Endpoint."""
    paths: dict = {}
    for route in app.router.routes:
        spec = endpoint_of(route.handler)
        if spec is None:
            continue
        params = re.findall(r"<(\w+)(?::([^>]*))?>", route.path)   # (name, type) each
        path = "/" + re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", route.path).lstrip("/")
        for method in sorted(route.methods - {"HEAD", "OPTIONS"}):
            paths.setdefault(path, {})[method.lower()] = _operation(path, method.lower(),
                                                                     spec, params)
    return {"openapi": "3.1.0",
            "info": {"title": "Hypnos", "version": hypnos_version(),
                     "description": DESCRIPTION},
            "paths": dict(sorted(paths.items())),
            "components": {"schemas": {"Error": ENVELOPE}}}
