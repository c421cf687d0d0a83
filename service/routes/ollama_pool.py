"""Ollama's /api/pull and /api/delete on the model pool (`lifecycle.catalog_pool` does the
work). Both change the pool, so with API keys set they need an admin key, as POST and
DELETE /v1/models do. Errors take Ollama's envelope, ``{"error": "..."}``.

/api/pull takes a catalog spec (``<id>`` or ``<id>:<quant>``; a trailing ``:latest`` means
the default variant) and answers Ollama's progress lines as NDJSON unless ``stream`` is
false: ``pulling manifest``, one ``pulling <digest>`` line per file as it starts and as it
is in place (``total``, ``completed``), ``verifying sha256 digest``, ``writing manifest``
(the model joins the pool), ``success``; a failure after the first line is a line with
``error``. ``stream: false`` answers only ``{"status": "success"}``. A name the catalog does
not hold but the pool does is already there: ``success`` at once. One pull of a model id runs
at a time: a second waits for the first to end, then finds its files in place and the model
in the pool. A pull whose model could not join the pool (its id is another model's alias) is
a 409 before any file is fetched.
"""
from __future__ import annotations

import json

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.catalog.catalog import CatalogError, Entry, UnsupportedEntry, Variant
from hypnos.catalog.pull import PullError
from hypnos.service import errors
from hypnos.service.wire.body import json_body
from hypnos.service.http.openapi import admin_only, endpoint, json_object, needs_ready
from hypnos.service.state import state_of
from hypnos.service.lifecycle.catalog_pool import (add_pulled, check_pull, digest,
                                                   present_size, pull_file, remove_with_files)
from hypnos.service.wire.model import validate
from hypnos.service.wire.ollama import ModelBody
from collections.abc import Awaitable, Callable

bp = Blueprint("ollama_pool")
NDJSON = "application/x-ndjson"
PULL_MEANINGS = {400: "malformed request, an entry this build cannot run, or the pulled "
                      "model fails the startup checks",
                 403: "not an admin key (with API keys set)",
                 404: "neither the catalog nor the pool holds the name",
                 409: "the name is another model's alias, or the pool it makes would not "
                      "start",
                 500: "a file could not be fetched or failed its size or sha256 check"}


def _resolve(request: Request, name: str) -> tuple[Entry, Variant] | None:
    """The catalog variant ``name`` names; None when only the pool holds it; 404 when
    neither does, 400 when this build cannot run the entry."""
    catalog = state_of(request).catalog
    sched = state_of(request).scheduler
    specs = [name] + ([name.removesuffix(":latest")] if name.endswith(":latest") else [])
    for spec in specs:
        if catalog is None:
            break
        try:
            entry, variant = catalog.resolve(spec)
            catalog.check_supported(entry)
        except UnsupportedEntry as exc:
            raise errors.InvalidRequest(str(exc), param="model") from None
        except CatalogError:
            continue
        return entry, variant
    if sched.resolve(name) in sched.models:
        return None
    raise errors.NotFoundError(f"pull model manifest: the catalog has no model '{name}'; "
                               "GET /v1/models/catalog lists them")


async def _pull(request: Request, entry: Entry, variant: Variant,
                say: Callable[[dict], Awaitable[None]]) -> None:
    """Every step of a pull, each announced through ``say`` (an async line sender); waits
    for a pull of the same id under way to end first."""
    models_dir = state_of(request).config.models_dir
    await say({"status": "pulling manifest"})
    async with state_of(request).pulls.turn(entry.id):
        for f in variant.files:
            line = {"status": f"pulling {digest(f).removeprefix('sha256:')[:12]}",
                    "digest": digest(f), "total": f.size or 0}
            await say({**line, "completed": present_size(models_dir, f)})
            try:
                size = await pull_file(entry, variant, f, models_dir)
            except PullError as exc:
                raise errors.ServerError(str(exc)) from None
            await say({**line, "total": f.size or size, "completed": size})
        await say({"status": "verifying sha256 digest"})
        await say({"status": "writing manifest"})
        await add_pulled(request.app, entry, variant)
    await say({"status": "success"})


@bp.post("/api/pull")
@admin_only
@needs_ready
@endpoint("Ollama pull: fetch a catalog model into models_dir and add it to the pool "
          "(admin); NDJSON progress lines unless stream is false", body=ModelBody,
          ok={**json_object("status"), NDJSON: {"type": "string"}},
          errors=(403, 404, 409, 500, 503), meanings=PULL_MEANINGS)
async def pull(request: Request) -> HTTPResponse | None:
    wire = validate(ModelBody, json_body(request))
    found = _resolve(request, wire.id)
    if found is not None:
        check_pull(request.app, *found)
    if wire.stream is False or found is None:
        if found is not None:
            async def quiet(_line: dict) -> None:
                return None
            await _pull(request, *found, quiet)
        return json_response({"status": "success"})
    response = await request.respond(content_type=NDJSON)

    async def say(line: dict) -> None:
        await response.send(json.dumps(line) + "\n")
    try:
        await _pull(request, *found, say)
    except errors.HypnosError as exc:
        await say({"error": exc.message})
    await response.eof()
    return None


@bp.delete("/api/delete")
@admin_only
@needs_ready
@endpoint("Ollama delete: remove a model from the pool and its files from models_dir "
          "(admin)", body=ModelBody, errors=(403, 404, 409, 503),
          meanings={403: "not an admin key (with API keys set)", 404: "unknown model",
                    409: "another model names this one as its speculative draft",
                    429: "requests still ran after the drain, or rate limited"})
async def delete(request: Request) -> HTTPResponse:
    wire = validate(ModelBody, json_body(request))
    await remove_with_files(request.app, wire.id)
    return json_response({})
