"""POST /mcp: the pool as MCP tools over Streamable HTTP (service/mcp/).

The request has passed the HTTP layers every route passes (browser Host/Origin checks, the
API key and its limits, the body size) when the handler hands it to the MCP SDK's ASGI app
(`http.asgi.serve_asgi`), its scope carrying the request's `ToolContext`. A GET (the stream
a stateful server would push on) is 405, as the protocol allows.

``RANKER`` is the rerank tool's scorer (`mcp.context.Ranker`): POST /v1/rerank's own
(`mcp.rerank.PoolRanker`); None lists no rerank tool.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sanic import Blueprint, HTTPResponse, Request, Sanic

from hypnos.service.http.asgi import serve_asgi
from hypnos.service.http.caller import caller_of
from hypnos.service.http.openapi import ENVELOPE, endpoint, hypnos_version, needs_ready
from hypnos.service import errors
from hypnos.service.mcp.context import SCOPE_KEY, Ranker, ToolContext
from hypnos.service.mcp.rerank import PoolRanker
from hypnos.service.state import state, state_of

if TYPE_CHECKING:
    from hypnos.service.mcp.server import McpService

bp = Blueprint("mcp")
PATH = "/mcp"
RANKER: Ranker | None = PoolRanker()


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
    return await serve_asgi(request, service.handle, {SCOPE_KEY: context}, label="MCP")
