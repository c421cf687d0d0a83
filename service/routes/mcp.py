"""POST /mcp: the pool as MCP tools over Streamable HTTP (service/mcp/).

The request has passed the HTTP layers every route passes (browser Host/Origin checks, the
API key and its limits, the body size) when the handler hands it to the MCP SDK's ASGI app:
the Sanic request becomes an ASGI scope carrying the request's `ToolContext`, its body the
one ``http.request`` message, and what the SDK sends becomes the response (a whole body
returned to the response layers, or a stream through ``request.respond``). A GET (the
stream a stateful server would push on) is 405, as the protocol allows.

``RANKER`` is the rerank tool's scorer (`mcp.tools.Ranker`): None lists no rerank tool.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sanic import Blueprint, HTTPResponse, Request, Sanic
from sanic.response import raw

from hypnos.service.http.caller import caller_of
from hypnos.service.http.openapi import ENVELOPE, endpoint, hypnos_version, needs_ready
from hypnos.service import errors
from hypnos.service.mcp.context import SCOPE_KEY, Ranker, ToolContext
from hypnos.service.state import state, state_of

if TYPE_CHECKING:
    from hypnos.service.mcp.server import McpService

bp = Blueprint("mcp")
PATH = "/mcp"
RANKER: Ranker | None = None


async def _service(app: Sanic) -> McpService:
    """The app's running MCP service, started at the first /mcp request (requests that
    come meanwhile wait for the same start). The SDK is imported here: a server without
    the ``mcp`` package answers /mcp with a 503 and serves every other route."""
    try:
        from hypnos.service.mcp.server import McpService
    except ImportError as exc:
        raise errors.ModelNotAvailable(
            f"/mcp needs the MCP SDK, which this install lacks ({exc}); pip install "
            "'mcp>=2.3,<3'") from None
    app_state = state(app)
    if app_state.mcp is None:
        app_state.mcp = McpService(hypnos_version(), app_state.config.limits.max_body_bytes)
    service = app_state.mcp
    assert isinstance(service, McpService)
    try:
        await service.ready()
    except Exception:
        if app_state.mcp is service:
            app_state.mcp = None        # the next request tries a new one
        raise
    return service


@bp.before_server_stop
async def _stop(app: Sanic) -> None:
    service = state(app).mcp
    if service is not None:
        state(app).mcp = None
        await service.stop()


def asgi_scope(request: Request, context: ToolContext) -> dict:
    conn = request.conn_info
    client = (conn.client_ip, conn.client_port) if conn is not None else None
    server = (conn.server, conn.server_port) if conn is not None else None
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.version, "method": request.method,
            "scheme": request.scheme, "path": request.path, "root_path": "",
            "raw_path": request.path.encode(), "query_string": request.query_string.encode(),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in request.headers.items()],
            "client": client, "server": server, SCOPE_KEY: context}


class Reply:
    """What the SDK sends, as the Sanic response: kept whole when it comes in one body
    message, streamed through ``request.respond`` when it comes in several."""

    def __init__(self, request: Request):
        self.request = request
        self.status = 500
        self.headers: dict[str, str] = {}
        self.whole: HTTPResponse | None = None
        self.stream: HTTPResponse | None = None

    async def send(self, message: MutableMapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            for k, v in message.get("headers", ()):
                self.headers[k.decode("latin-1").lower()] = v.decode("latin-1")
            return
        if kind != "http.response.body":
            return
        body, more = message.get("body", b""), message.get("more_body", False)
        if self.stream is None and not more:
            ctype = self.headers.pop("content-type", "application/json")
            self.headers.pop("content-length", None)
            if self.status >= 400 and not _json_rpc_error(body):
                body, ctype = _envelope(self.status, body), "application/json"
            self.whole = raw(body, status=self.status, headers=self.headers,
                             content_type=ctype)
            return
        if self.stream is None:
            ctype = self.headers.pop("content-type", "text/event-stream")
            self.headers.pop("content-length", None)
            self.stream = await self.request.respond(status=self.status, headers=self.headers,
                                                     content_type=ctype)
        if body:
            await self.stream.send(body)
        if not more:
            await self.stream.eof()


def _json_rpc_error(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), dict)


def _envelope(status: int, body: bytes) -> bytes:
    """The error envelope for what the SDK refused over HTTP without a JSON-RPC error (a
    wrong Content-Type or Accept, a GET): its words, or the status's."""
    said = body.decode("utf-8", "replace").strip() or {
        405: "Method not allowed", 406: "Not acceptable: send Accept: application/json, "
        "text/event-stream", 413: "The request body is too large"}.get(status, "Refused")
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": f"MCP: {said}", "type": kind}}).encode()


class JsonRpcBody(BaseModel):
    """One MCP message: a JSON-RPC 2.0 request (with ``id``) or notification (without)."""
    model_config = ConfigDict(extra="allow")
    jsonrpc: Literal["2.0"]
    method: str = Field(description="initialize, tools/list, tools/call, resources/list, "
                                    "resources/read, ping, notifications/...")
    id: Any = Field(None, description="A request's id (a number or a string); none on a "
                                      "notification")
    params: Any = Field(None, description="The method's parameters (an object)")


JSON_RPC_ERROR = {"type": "object", "required": ["jsonrpc", "error"], "properties": {
    "jsonrpc": {"const": "2.0"}, "id": {"type": ["integer", "string", "null"]},
    "error": {"type": "object", "required": ["code", "message"],
              "properties": {"code": {"type": "integer"}, "message": {"type": "string"}}}}}
REFUSED = {"anyOf": [ENVELOPE, JSON_RPC_ERROR]}


@bp.post(PATH)
@needs_ready
@endpoint("MCP (Model Context Protocol, Streamable HTTP, stateless): the pool's models as "
          "tools and resources (docs/clients.md)", body=JsonRpcBody, errors=(401, 429),
          meanings={400: "not a JSON-RPC message (a JSON-RPC error) or not Content-Type: "
                         "application/json",
                    202: "a notification, accepted (no body)",
                    406: "Accept lacks application/json and text/event-stream (a JSON-RPC "
                         "error)"},
          other={202: None, 400: REFUSED, 406: REFUSED},
          ok={"application/json": {"type": "object", "description": "A JSON-RPC response "
                                   "(a tool's refusal is a result with isError)"},
              "text/event-stream": {"type": "string"}})
async def mcp(request: Request) -> HTTPResponse | None:
    service = await _service(request.app)
    context = ToolContext(caller=caller_of(request), config=state_of(request).config,
                          ranker=RANKER)
    sent = False
    never = asyncio.Event()

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": request.body or b"", "more_body": False}
        await never.wait()          # the client's hang-up cancels the handler instead
        return {"type": "http.disconnect"}

    reply = Reply(request)
    await service.handle(asgi_scope(request, context), receive, reply.send)
    if reply.stream is not None:
        return None
    return reply.whole or HTTPResponse(status=reply.status, headers=reply.headers)
