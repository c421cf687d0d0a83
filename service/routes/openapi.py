"""GET /openapi.json: the document `http.openapi.document` builds from every route's
``@endpoint`` (built once, the routes are fixed once the server runs)."""
from __future__ import annotations

from sanic import Blueprint, Request
from sanic.response import json as json_response

from hypnos.service.http.openapi import document, endpoint

bp = Blueprint("openapi")


@bp.get("/openapi.json")
@endpoint("This document")
async def openapi(request: Request):
    app = request.app
    if getattr(app.ctx, "openapi", None) is None:
        app.ctx.openapi = document(app)     # routes are fixed once the server runs
    return json_response(app.ctx.openapi)
