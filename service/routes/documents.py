"""POST /v1/documents/convert and the picture store's routes (spec 12).

The engine opens the document first (format, page count, page range): a refused document
gets its HTTP error before any stream starts. Pages are then converted one by one; with
``stream`` each goes out as a ``document.page`` event as soon as it is ready, and a client
that hangs up stops the conversion at the next page.
"""
from __future__ import annotations

import asyncio
import base64
import copy
import json
import time
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

from sanic import Blueprint, HTTPResponse, Request, Sanic
from sanic.response import json as json_response
from sanic.response import raw

from hypnos.engines.records import ConvertedPage, OpenedDocument
from hypnos.service import errors
from hypnos.service.http.caller import caller_of
from hypnos.service.wire.documents import (
    FILE_OR_URL, OCR_WORDS, ConvertBody, ConvertParams, DocumentBody, check_document,
    parse_convert,
)
from hypnos.service.inference.capabilities import DOCUMENTS, require
from hypnos.service.inference.leased import LeasedCall, leased
from hypnos.service.media.markdown_join import join_pages
from hypnos.service.media.fetch import fetch_url
from hypnos.service.inference.pictures import check_vision_model, describe_page
from hypnos.service.media.picture_store import PictureStore, PicturesTooLarge, StoredDocument
from hypnos.service.http.openapi import ANY_OBJECT, INFERENCE_ERRORS, endpoint, needs_ready
from hypnos.service.wire.model import body_schema
from hypnos.service.state import state, state_of
from typing import Any

bp = Blueprint("documents")
KEEPALIVE_SECS = 10.0


def picture_store(app: Sanic) -> PictureStore:
    store = state(app).pictures
    if store is None:
        cfg = state(app).config.server
        store = state(app).pictures = PictureStore(cfg.document_pictures_ttl_secs,
                                                   cfg.document_pictures_max_bytes)
    return store


class Conversion:
    """One leased conversion: renders pages and the final body, files pictures."""

    def __init__(self, request: Request, params: ConvertParams, call: LeasedCall,
                 doc: OpenedDocument, started: float):
        self.request, self.params, self.call, self.doc = request, params, call, doc
        self.stored: StoredDocument | None = (
            picture_store(request.app).create() if params.return_pictures else None)
        self.pages: list[ConvertedPage] = []
        self.described = 0
        self.started = started          # before the engine opened the document

    async def describe(self, page: ConvertedPage) -> None:
        if self.params.describe_pictures is not None:
            self.described += await describe_page(state_of(self.request).scheduler,
                                                  self.params.describe_pictures, page)

    def page_body(self, page: ConvertedPage) -> dict:
        self.pages.append(page)
        body = {"page": page.page, "markdown": page.markdown, "pictures": len(page.pictures),
                "tables": page.tables, "ms": round(page.ms, 1), "ocr": page.ocr}
        if page.json is not None:
            body["json"] = page.json
        if self.stored is not None:
            try:
                indexes = picture_store(self.request.app).add(self.stored, page.pictures)
            except PicturesTooLarge as exc:
                raise errors.InvalidRequest(str(exc), param="return_pictures") from None
            body["picture_urls"] = [f"/v1/documents/{self.stored.id}/pictures/{i}"
                                    for i in indexes]
        return body

    def head(self) -> dict:
        out = {"object": "document"}
        if self.stored is not None:
            out["id"] = self.stored.id
            out["pictures_expire_at"] = self.stored.expires_iso
        return out

    def capability(self) -> dict:
        """What the engine could do for this document: the OCR engine, the layout model."""
        doc = self.doc
        return {"ocr_engine": doc.ocr_engine, "layout_model": doc.layout_model,
                "warning": doc.warning}

    def final_body(self, pages: list[dict]) -> dict:
        inference_ms = (time.monotonic() - self.started) * 1000
        n = len(self.pages)
        ocr_pages = [p.page for p in self.pages if p.ocr]
        engine = {"pages": n, "ms_per_page": round(inference_ms / n, 1) if n else 0.0,
                  "queue_ms": self.call.queue_ms}
        return {**self.head(), "model": self.params.model,
                "filename": self.params.document.filename or None, "format": self.doc.format,
                "pipeline": self.doc.pipeline, "page_count": self.doc.page_count,
                "pages": pages, "markdown": join_pages([p.markdown for p in self.pages]),
                "usage": {"pages": n, "pictures": sum(len(p.pictures) for p in self.pages),
                          "tables": sum(p.tables for p in self.pages),
                          "pictures_described": self.described},
                "ocr": {"engine": self.doc.ocr_engine, "pages": ocr_pages} if ocr_pages
                else None, **self.capability(),
                "hypnos_telemetry": self.call.telemetry(engine, inference_ms=inference_ms)}


async def _fetch(request: Request, params: ConvertParams) -> None:
    limits = state_of(request).config.limits
    if not limits.allow_remote_image_urls:
        raise errors.InvalidRequest("This server does not fetch remote URLs "
                                    "(limits.allow_remote_image_urls); upload the file "
                                    "instead of 'url'", param="url")
    assert params.url is not None           # fetched only when a url was given
    data, final = await fetch_url(params.url, "url", max_bytes=limits.max_document_bytes,
                                  limit_name="limits.max_document_bytes",
                                  allow_private=limits.allow_private_urls)
    check_document(data, limits.max_document_bytes, "url")
    params.document.data = data
    params.document.filename = (params.document.filename
                                or PurePosixPath(unquote(urlparse(final).path)).name)


_CONVERT_FIELDS = {"model": {"type": "string", "minLength": 1}, "url": {"type": "string"},
                   "output_format": {"enum": ["markdown", "json"]},
                   "filename": {"type": "string"}, "describe_pictures": {"type": "string"},
                   "ocr": {"enum": ["", *OCR_WORDS], "default": "auto",
                           "description": "auto, true or false (also 1/0, yes/no, on/off; "
                                          "any case)"}}
CONVERT_FORM = {"type": "object", "required": ["model"], **copy.deepcopy(FILE_OR_URL),
                "description": "The document as the `file` part, or a `url` to fetch it "
                               "from (exactly one of them).",
                "properties": {"file": {"type": "string", "minLength": 1,
                                        "contentMediaType": "application/octet-stream"},
                               **_CONVERT_FIELDS}}


@bp.post("/v1/documents/convert")
@needs_ready
@endpoint("Convert a document (multipart upload, or JSON with base64 file or url); events per "
          "page when stream is true", body=ConvertBody, form=CONVERT_FORM,
          errors=INFERENCE_ERRORS,
          ok={"application/json": body_schema(DocumentBody),
              "text/event-stream": {"type": "string"}})
async def convert(request: Request) -> HTTPResponse | None:
    params = parse_convert(request, state_of(request).config.limits.max_document_bytes)
    require(state_of(request).scheduler, params.model, DOCUMENTS)
    if params.describe_pictures is not None:
        check_vision_model(state_of(request).scheduler, params.describe_pictures)
    if params.url is not None:
        await _fetch(request, params)
    async with leased(caller_of(request), params.model, DOCUMENTS, param="file",
                      checked=True) as call:
        started = time.monotonic()
        doc = await call.run(lambda req, _cancel: call.converter.open(req), params.document)
        conv = Conversion(request, params, call, doc, started)
        if params.stream:
            return await _stream(conv)
        pages = await call.run(call.converter.convert_pages, doc, lambda _p: None,
                               what="The conversion")
        for page in pages:
            await conv.describe(page)
        body = conv.final_body([conv.page_body(p) for p in pages])
    return json_response(body, headers=call.wait_headers())


def _event(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def _stream(conv: Conversion) -> HTTPResponse | None:
    doc = conv.doc
    response = await conv.request.respond(content_type="text/event-stream", headers={
        "cache-control": "no-cache", **conv.call.wait_headers()})
    started = {"object": "document.started", "page_count": doc.page_count,
               "pages": doc.pages, "format": doc.format, "pipeline": doc.pipeline,
               **conv.capability()}
    if conv.stored is not None:
        started["id"] = conv.stored.id
    await response.send(_event(started))
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    call = conv.call
    task = asyncio.ensure_future(call.run(
        call.converter.convert_pages, doc,
        lambda page: loop.call_soon_threadsafe(queue.put_nowait, page), what="The conversion"))
    task.add_done_callback(lambda _t: loop.call_soon_threadsafe(queue.put_nowait, None))
    try:
        while (page := await _next(queue, response)) is not None:
            await conv.describe(page)
            await response.send(_event({"object": "document.page", **conv.page_body(page)}))
        task.result()
        await response.send(_event(conv.final_body([])))
    except errors.HypnosError as exc:
        call.cancel.set()
        await asyncio.wait({task})
        message = exc.message.removeprefix("The conversion failed: ")
        await response.send(_event({"object": "error", "error": {
            "message": f"The conversion failed: {message}", "type": "server_error"}}))
    except asyncio.CancelledError:
        call.cancel.set()
        await asyncio.wait({task})
        raise
    await response.send("data: [DONE]\n\n")
    await response.eof()
    return None


async def _next(queue: asyncio.Queue, response: HTTPResponse) -> Any:
    while True:
        try:
            return await asyncio.wait_for(queue.get(), KEEPALIVE_SECS)
        except TimeoutError:
            await response.send(": keep-alive\n\n")


# ------------------------------------------------------------------ the picture store

def _stored(request: Request, doc_id: str) -> StoredDocument:
    doc = picture_store(request.app).get(doc_id)
    if doc is None:
        raise errors.NotFoundError(f"No stored pictures for document '{doc_id}' (unknown, "
                                   "deleted or expired)")
    return doc


def _record(doc: StoredDocument, index: int, with_image: bool) -> dict:
    pic = doc.pictures[index - 1]
    out = {"object": "document.picture", "document_id": doc.id, "index": index,
           "page": pic.page, "url": f"/v1/documents/{doc.id}/pictures/{index}",
           "mime": pic.mime, "bytes": len(pic.data or b""), "width": pic.width,
           "height": pic.height, "dpi": pic.dpi, "bbox": pic.bbox, "page_size": pic.page_size}
    out.update({k: v for k, v in (("caption", pic.caption), ("ref", pic.ref)) if v})
    if with_image:
        out["image"] = base64.b64encode(pic.data or b"").decode("ascii")
    return out


@bp.get("/v1/documents/<doc_id>/pictures")
@endpoint("The pictures kept from a converted document", errors=(404,))
async def list_pictures(request: Request, doc_id: str) -> HTTPResponse:
    doc = _stored(request, doc_id)
    return json_response({"object": "list", "document_id": doc.id,
                          "expires_at": doc.expires_iso,
                          "data": [_record(doc, i, False)
                                   for i in range(1, len(doc.pictures) + 1)]})


@bp.get("/v1/documents/<doc_id>/pictures/<index:int>")
@endpoint("One picture of a converted document", errors=(404,),
          query={"format": {"type": "string"}},
          ok={"image/png": {"type": "string"}, "application/json": ANY_OBJECT})
async def get_picture(request: Request, doc_id: str, index: int) -> HTTPResponse:
    doc = _stored(request, doc_id)
    if not 1 <= index <= len(doc.pictures):
        raise errors.NotFoundError(f"Document '{doc_id}' has {len(doc.pictures)} pictures; "
                                   f"there is no picture {index}")
    fmt = request.args.get("format")
    if fmt == "image":
        pic = doc.pictures[index - 1]
        return raw(pic.data or b"", content_type=pic.mime,
                   headers={"cache-control": "private, no-store"})
    if fmt not in (None, "json"):
        raise errors.InvalidRequest(f"'format' must be image or json, got {fmt!r}",
                                    param="format")
    return json_response(_record(doc, index, True))


@bp.delete("/v1/documents/<doc_id>")
@endpoint("Release a converted document's pictures", errors=(404,))
async def delete_document(request: Request, doc_id: str) -> HTTPResponse:
    if not picture_store(request.app).delete(doc_id):
        raise errors.NotFoundError(f"No stored pictures for document '{doc_id}' (unknown, "
                                   "deleted or expired)")
    return json_response({"object": "document.deleted", "id": doc_id, "deleted": True})
