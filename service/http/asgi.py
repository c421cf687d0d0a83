"""One Sanic request served by an ASGI application (the MCP SDK's, routes/mcp.py), after
the HTTP layers every route passes.

The request becomes an ASGI ``http`` scope (plus the caller's ``extra`` entries), its body
the one ``http.request`` message; a later ``receive`` waits until the handler is cancelled
(the client hung up). What the application sends becomes the response: a body sent in one
message is returned whole to the response layers, one sent in several is streamed through
``request.respond``. A refusal (4xx, 5xx) sent without a JSON error object is answered in
the error envelope instead, so every refusal names its cause the same way.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sanic import HTTPResponse, Request
from sanic.response import raw

Message = MutableMapping[str, Any]
AsgiApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]
BARE = {405: "Method not allowed", 406: "Not acceptable", 413: "The request body is too large"}


def asgi_scope(request: Request, extra: dict[str, Any]) -> dict[str, Any]:
    conn = request.conn_info
    client = (conn.client_ip, conn.client_port) if conn is not None else None
    server = (conn.server, conn.server_port) if conn is not None else None
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.version, "method": request.method,
            "scheme": request.scheme, "path": request.path, "root_path": "",
            "raw_path": request.path.encode(), "query_string": request.query_string.encode(),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in request.headers.items()],
            "client": client, "server": server, **extra}


def has_error_object(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), dict)


def envelope(status: int, body: bytes, label: str) -> bytes:
    """The error envelope for a bare refusal: its words, or the status's."""
    said = body.decode("utf-8", "replace").strip() or BARE.get(status, "Refused")
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": f"{label}: {said}", "type": kind}}).encode()


class Reply:
    """What the application sends, as the Sanic response (see the module docstring)."""

    def __init__(self, request: Request, label: str):
        self.request, self.label = request, label
        self.status = 500
        self.headers: dict[str, str] = {}
        self.whole: HTTPResponse | None = None
        self.stream: HTTPResponse | None = None

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            for k, v in message.get("headers", ()):
                self.headers[k.decode("latin-1").lower()] = v.decode("latin-1")
            return
        if kind != "http.response.body":
            return
        body, more = message.get("body", b""), message.get("more_body", False)
        self.headers.pop("content-length", None)
        if self.stream is None and not more:
            ctype = self.headers.pop("content-type", "application/json")
            if self.status >= 400 and not has_error_object(body):
                body, ctype = envelope(self.status, body, self.label), "application/json"
            self.whole = raw(body, status=self.status, headers=self.headers,
                             content_type=ctype)
            return
        if self.stream is None:
            ctype = self.headers.pop("content-type", "text/event-stream")
            self.stream = await self.request.respond(status=self.status, headers=self.headers,
                                                     content_type=ctype)
        if body:
            await self.stream.send(body)
        if not more:
            await self.stream.eof()


async def serve_asgi(request: Request, app: AsgiApp, extra: dict[str, Any],
                     label: str) -> HTTPResponse | None:
    """Run ``app`` on ``request``: the whole response to return, or None once it was
    streamed. ``label`` prefixes the message of a bare refusal ("MCP: Not acceptable")."""
    sent = False
    never = asyncio.Event()

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": request.body or b"", "more_body": False}
        await never.wait()          # the client's hang-up cancels the handler instead
        return {"type": "http.disconnect"}

    reply = Reply(request, label)
    await app(asgi_scope(request, extra), receive, reply.send)
    if reply.stream is not None:
        return None
    return reply.whole or HTTPResponse(status=reply.status, headers=reply.headers)
