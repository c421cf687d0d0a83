"""The playground (spec sections 1 and 14): a web page for trying every model and watching the
tiers. Static files shipped in the package (``service/playground/``: plain HTML, CSS and ES
modules, no build step, nothing fetched from elsewhere), served at ``/`` and
``/playground/<file>``; nothing here is under ``/v1``, so the API is never shadowed.

With ``server.playground = false`` (``hypnos serve --no-playground``) both answer 404.
"""
from __future__ import annotations

from pathlib import Path

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import file as file_response

from hypnos.service import errors
from hypnos.service.http.openapi import endpoint
from hypnos.service.state import state_of

bp = Blueprint("playground")
PLAYGROUND_DIR = Path(__file__).resolve().parent.parent / "playground"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
# The page talks to this server only: no inline script, no other origin. blob: and data:
# carry recorded audio, attached images and the synthesized speech.
CSP = ("default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob: data:; "
       "style-src 'self'; script-src 'self'; connect-src 'self'; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'")


async def _serve(request: Request, name: str) -> HTTPResponse:
    if not state_of(request).config.server.playground:
        raise errors.NotFoundError("The playground is turned off on this server "
                                   "(server.playground = false); the API lives under /v1")
    path = (PLAYGROUND_DIR / name).resolve()
    # Only the shipped files directly in the folder, whatever the name smuggles in.
    if path.parent != PLAYGROUND_DIR or name.startswith(".") or \
            path.suffix not in CONTENT_TYPES or not path.is_file():
        raise errors.NotFoundError(f"The playground has no file {name!r}")
    # no-cache: the page revalidates, so an upgraded server is never run with stale scripts.
    return await file_response(path, mime_type=CONTENT_TYPES[path.suffix],
                               headers={"cache-control": "no-cache",
                                        "content-security-policy": CSP,
                                        "x-content-type-options": "nosniff"})


@bp.get("/")
@endpoint("The playground web page", errors=(404,), ok={"text/html": {"type": "string"}})
async def index(request: Request) -> HTTPResponse:
    return await _serve(request, "index.html")


@bp.get("/playground/<name:str>")
@endpoint("A playground asset", errors=(404,), ok={"*/*": {"type": "string"}})
async def asset(request: Request, name: str) -> HTTPResponse:
    return await _serve(request, name)
