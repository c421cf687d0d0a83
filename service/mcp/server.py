"""The MCP SDK's server for /mcp: its handlers (tools, resources) and the SDK's Streamable
HTTP session manager that speaks the protocol, run stateless.

Stateless: every POST is one exchange on its own (no session id, no server-to-client
stream), so each carries its own API key through the HTTP layers, and the tool runs in the
HTTP request's own task (its record, its caller). The route (routes/mcp.py) hands the SDK
the request as an ASGI scope whose ``SCOPE_KEY`` entry is the request's `ToolContext`; a
handler reads it back from the SDK's request context. Host and Origin are the HTTP layers'
checks (http/browser.py), done before the SDK sees the request, so the SDK's own DNS
rebinding check is off.

`McpService` owns the session manager's run: `ready` enters it once in a task of its own
(the SDK keeps its task group there), `stop` leaves it. A manager runs once; a new service
is made after a stop.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import Receive, Scope, Send

from hypnos.service.mcp.refusal import ToolRefused
from hypnos.service.mcp.context import SCOPE_KEY, ToolContext
from hypnos.service.mcp.tools import ToolSpec, call_spec, listed, serving
from hypnos.service.mcp.tools_media import CONVERT, SPEAK, TRANSCRIBE
from hypnos.service.mcp.tools_text import ASK, EMBED, ENTITIES_TOOL, IMAGE, RERANK

SPECS: list[ToolSpec] = [TRANSCRIBE, SPEAK, CONVERT, ENTITIES_TOOL, EMBED, RERANK, IMAGE, ASK]
BY_NAME = {spec.name: spec for spec in SPECS}
POOL_URI = "hypnos://models"
INSTRUCTIONS = (
    "Hypnos serves local models: transcription, speech, document conversion with OCR, "
    "entity extraction, embeddings, reranking, image generation and chat. Each tool names "
    "the models that can serve it; resources list the pool's models and their memory tiers.")


def context_of(ctx: ServerRequestContext) -> ToolContext:
    """The request's `ToolContext`, put in the ASGI scope by the route."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    tool_ctx = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    if not isinstance(tool_ctx, ToolContext):
        raise MCPError(types.INTERNAL_ERROR, "the request reached the MCP server without "
                       "its Hypnos context")
    return tool_ctx


# --------------------------------------------------------------------- handlers

async def _list_tools(ctx: ServerRequestContext,
                      params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=listed(context_of(ctx), SPECS))


async def _call_tool(ctx: ServerRequestContext,
                     params: types.CallToolRequestParams) -> types.CallToolResult:
    spec = BY_NAME.get(params.name)
    if spec is None:
        return types.CallToolResult(content=[types.TextContent(
            text=f"No tool {params.name!r}; tools/list names the tools")], is_error=True)
    return await call_spec(context_of(ctx), spec, params.arguments)


def model_entry(ctx: ToolContext, model_id: str) -> dict[str, Any]:
    st = ctx.caller.sched.get(model_id, enabled_only=False)
    tools = [spec.name for spec in SPECS if spec.family is not None and st.enabled
             and model_id in serving(ctx, spec.family)]
    if st.enabled and ctx.ranker is not None and model_id in ctx.ranker.models(ctx):
        tools.append(RERANK.name)
    return {"id": st.id, "modality": st.cfg.modality, "modalities": st.cfg.all_modalities,
            "engine": st.cfg.engine, "tier": str(st.tier), "enabled": st.enabled,
            "aliases": list(st.cfg.aliases), "tools": tools}


def _model_uri(model_id: str) -> str:
    return f"{POOL_URI}/{model_id}"


async def _list_resources(ctx: ServerRequestContext, params: types.PaginatedRequestParams
                          | None) -> types.ListResourcesResult:
    tool_ctx = context_of(ctx)
    pool = types.Resource(uri=POOL_URI, name="models", title="The model pool",
                          description="Every model of this server: modalities, engine, "
                                      "memory tier and the tools it serves",
                          mime_type="application/json")
    models = [types.Resource(uri=_model_uri(st.id), name=st.id,
                             description=f"{st.cfg.modality} model ({st.cfg.engine}), "
                                         f"now in {st.tier}", mime_type="application/json")
              for st in tool_ctx.caller.sched.models.values()]
    return types.ListResourcesResult(resources=[pool, *models])


async def _read_resource(ctx: ServerRequestContext,
                         params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    tool_ctx = context_of(ctx)
    uri = str(params.uri)
    sched = tool_ctx.caller.sched
    if uri == POOL_URI:
        data: Any = {"models": [model_entry(tool_ctx, m) for m in sched.models]}
    elif uri.startswith(POOL_URI + "/") and uri[len(POOL_URI) + 1:] in sched.models:
        data = model_entry(tool_ctx, uri[len(POOL_URI) + 1:])
    else:
        raise MCPError(types.INVALID_PARAMS, f"No resource {uri!r}; resources/list names them")
    return types.ReadResourceResult(contents=[types.TextResourceContents(
        uri=uri, mime_type="application/json", text=json.dumps(data, indent=1))])


def build_server(version: str) -> Server:
    return Server("hypnos", version=version, title="Hypnos", instructions=INSTRUCTIONS,
                  on_list_tools=_list_tools, on_call_tool=_call_tool,
                  on_list_resources=_list_resources, on_read_resource=_read_resource)


# --------------------------------------------------------------------- the service

class McpService:
    """The SDK's session manager, run in a task of its own between `ready` and `stop`.
    ``max_body_bytes``: the largest request body it reads (limits.max_body_bytes)."""

    def __init__(self, version: str, max_body_bytes: int):
        # The SDK logs every stateless exchange's end at INFO ("Terminating session: None").
        logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)
        self.manager = StreamableHTTPSessionManager(
            app=build_server(version), json_response=True, stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=max_body_bytes)
        self._stop = asyncio.Event()
        self._started: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    async def ready(self) -> None:
        """Enter the manager's run once (every caller waits for the same start); returns
        once it accepts requests, or raises what stopped it."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        running = asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                running.set()
                await self._stop.wait()

        self._task = asyncio.create_task(hold(), name="hypnos-mcp")
        waiter = asyncio.ensure_future(running.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not running.is_set():
            waiter.cancel()
            self._task.result()         # raises what stopped it

    async def stop(self) -> None:
        """Leave the manager's run: its exchanges in flight are cancelled."""
        self._stop.set()
        if self._task is not None:
            await asyncio.wait({self._task})

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One HTTP exchange, as the SDK's ASGI app."""
        await self.manager.handle_request(scope, receive, send)


__all__ = ["McpService", "SCOPE_KEY", "ToolRefused"]
