"""GET /openapi.json: the document `http.openapi.document` builds from every route's
``@endpoint`` (built once, the routes are fixed once the server runs)."""
from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service.http.openapi import document, endpoint
from hypnos.service.state import state

bp = Blueprint("openapi")


@bp.get("/openapi.json")
@endpoint("This document")
async def openapi(request: Request) -> HTTPResponse:
    app = request.app
    built = state(app).openapi
    if built is None:
        built = state(app).openapi = document(app)    # routes are fixed once the server runs
    return json_response(built)
