"""Parsing POST /v1/documents/convert (spec 12) into a typed request: multipart parts or the
same names as JSON fields. Every problem is a 400 naming the field."""
from __future__ import annotations

import base64
import copy
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from hypnos.engines.records import DocumentRequest
from hypnos.service import errors
from hypnos.service.wire.body import Incoming, json_body
from hypnos.service.wire.model import Says, Wire, validate

FORMATS = ("markdown", "json")
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
PAGES = r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$"
_DATA_URI = re.compile(r"^data:[^;,]*(;[^,]*)?,", re.IGNORECASE)
#: The document comes as exactly one of ``file`` and ``url``, as /openapi.json states it for
#: the JSON body and the form alike; `_common` refuses the rest (an empty or null field
#: counts as absent).
FILE_OR_URL: dict[str, Any] = {"oneOf": [
    {"required": ["file"], "properties": {"file": {"type": "string", "minLength": 1}}},
    {"required": ["url"], "properties": {"url": {"type": "string", "minLength": 1}}}]}


@dataclass
class ConvertParams:
    model: str
    document: DocumentRequest
    stream: bool = False
    return_pictures: bool = False
    output_format: str = "markdown"
    url: str | None = None              # fetched by the route (document.data is empty)
    describe_pictures: str | None = None    # a vision model id


def parse_bool(value, name: str, default: bool) -> bool:
    """A JSON boolean, or in a multipart part true/false, 1/0, yes/no, on/off."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise errors.InvalidRequest(f"'{name}' must be a boolean (true/false, 1/0, yes/no, "
                                f"on/off), got {value!r}", param=name)


OCR_WORDS = {"auto": "auto", **dict.fromkeys(TRUE, "on"), **dict.fromkeys(FALSE, "off")}


# What `decode_file` reads, as the document states it: base64 (whole 4-character groups),
# after an optional data: URI prefix that says base64.
BASE64_FILE = (r"^(?:data:[^,]*;base64,)?(?:[A-Za-z0-9+/]{4})*"
               r"(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")


def parse_ocr(value) -> str:
    """``ocr``: "auto" (the default), true or false -- JSON booleans, or in a multipart part
    auto and the words parse_bool takes -- into the engine's auto | on | off."""
    if value is None or value == "":
        return "auto"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in OCR_WORDS:
        return OCR_WORDS[value.strip().lower()]
    raise errors.InvalidRequest(f"'ocr' must be auto, true or false (auto: OCR the pages "
                                f"that have no text layer), got {value!r}", param="ocr")


def parse_pages(value) -> tuple[int, int] | None:
    """"3" -> (3, 3); "2-5" -> (2, 5); 1-based and inclusive."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    m = re.fullmatch(PAGES, value) if isinstance(value, str) else None
    if m is None:
        raise errors.InvalidRequest(f"'pages' must be a page number or an inclusive range "
                                    f"such as \"3\" or \"2-5\", got {value!r}", param="pages")
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    if first < 1 or last < first:
        raise errors.InvalidRequest(f"'pages' {value!r}: pages count from 1 and a range "
                                    "must not run backwards", param="pages")
    return first, last


def decode_file(value, max_bytes: int) -> bytes:
    """A JSON ``file``: base64, or a data: URI holding base64."""
    if not isinstance(value, str) or not value:
        raise errors.InvalidRequest("'file' must be the document as base64 or a data: URI "
                                    "(or send multipart/form-data with a 'file' part)",
                                    param="file")
    m = _DATA_URI.match(value)
    if m is not None:
        if "base64" not in (m.group(1) or "").lower():
            raise errors.InvalidRequest("a data: URI in 'file' must be base64-encoded",
                                        param="file")
        value = value[m.end():]
    if len(value) * 3 // 4 > max_bytes + 3:
        _too_large(len(value) * 3 // 4, max_bytes)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise errors.InvalidRequest("'file' is not valid base64", param="file") from None


def check_document(data: bytes | None, max_bytes: int, param: str) -> None:
    """A 400 for an empty document or one above max_document_bytes (None: not sent)."""
    if data is None:
        return
    if not data:
        raise errors.InvalidRequest(f"'{param}' is empty", param=param)
    if len(data) > max_bytes:
        _too_large(len(data), max_bytes, param)


def _too_large(size: int, max_bytes: int, param: str = "file"):
    raise errors.InvalidRequest(f"The document is {size} bytes; max_document_bytes is "
                                f"{max_bytes}", param=param)


def _text(value, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise errors.InvalidRequest(f"'{name}' must be a string", param=name)
    return value


FLAG = Annotated[bool, Says("'{at}' must be a boolean (true/false, 1/0, yes/no, on/off), "
                           "got {got}")] | None


class ConvertBody(Wire):
    """The JSON form of a conversion: the document as base64 (or a data: URI) in ``file``,
    or a ``url`` to fetch it from (exactly one of them); ``pages`` is "3" or "2-5" (1-based,
    inclusive)."""
    model_config = ConfigDict(
        json_schema_extra=lambda schema: schema.update(copy.deepcopy(FILE_OR_URL)))
    model: Annotated[str, Field(min_length=1), Says(
        "'model' is required: a model serving document_conversion")]
    file: Annotated[str, Field(min_length=1, pattern=BASE64_FILE), Says(
        "'file' must be the document as base64 or a data: URI holding base64 (or send "
        "multipart/form-data with a 'file' part)")] | None = None
    url: str | None = None
    output_format: Annotated[Literal["markdown", "json"], Says(
        "'output_format' must be markdown or json, got {got}")] | None = None
    filename: str | None = None
    describe_pictures: str | None = None
    pages: Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern=PAGES)] | None = None
    ocr: Annotated[bool | Literal["auto"], Says(
        "'ocr' must be auto, true or false (auto: OCR the pages that have no text layer), "
        "got {got}")] | None = Field(None, description=(
            "auto (default): OCR the pages that have no text layer (scans) and images; "
            "true: OCR every page, its OCR text replacing the text layer; false: never"))
    return_pictures: FLAG = None
    stream: FLAG = None


class FormIncoming(Incoming, Protocol):
    """A request that may come as a multipart form (a Sanic request is one)."""

    @property
    def form(self) -> Mapping[str, Any] | None: ...

    @property
    def files(self) -> Mapping[str, Any] | None: ...


def parse_convert(request: FormIncoming, max_document_bytes: int) -> ConvertParams:
    """The convert request from its multipart parts or JSON body; ``max_document_bytes``:
    limits.max_document_bytes."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = request.form or {}
        fields = {k: form.get(k) for k in form}
        upload = request.files.get("file") if request.files else None
        data, upload_name = (upload.body, upload.name) if upload is not None else (None, None)
    else:
        body = json_body(request)
        validate(ConvertBody, body)       # the declared fields; _common reads the values
        fields, data, upload_name = body, None, None
    return _common(fields, data, upload_name, max_document_bytes)


def _common(fields: dict, data: bytes | None, upload_name: str | None,
            max_bytes: int) -> ConvertParams:
    """``data`` is the uploaded part; without one, ``fields["file"]`` is decoded."""
    model = _text(fields.get("model"), "model")
    if not model:
        raise errors.InvalidRequest("'model' is required: a model serving "
                                    "document_conversion", param="model")
    url = _text(fields.get("url"), "url")
    describe = _text(fields.get("describe_pictures"), "describe_pictures")
    if data is None and fields.get("file") is not None:
        data = decode_file(fields["file"], max_bytes)
    if data is not None and url is not None:
        raise errors.InvalidRequest("send the document as 'file' or as 'url', not both",
                                    param="url")
    if data is None and url is None:
        raise errors.InvalidRequest("'file' is required: the document (a multipart part, or "
                                    "base64 / a data: URI in JSON), or a 'url' to fetch it "
                                    "from", param="file")
    check_document(data, max_bytes, "file")
    fmt = _text(fields.get("output_format"), "output_format") or "markdown"
    if fmt not in FORMATS:
        raise errors.InvalidRequest(f"'output_format' must be markdown or json, got {fmt!r}",
                                    param="output_format")
    filename = _text(fields.get("filename"), "filename") or upload_name or ""
    doc = DocumentRequest(data=data or b"", filename=filename,
                          pages=parse_pages(fields.get("pages")),
                          ocr=parse_ocr(fields.get("ocr")),
                          want_json=fmt == "json")
    keep = parse_bool(fields.get("return_pictures"), "return_pictures", False)
    doc.want_pictures = keep or describe is not None
    return ConvertParams(model=model, document=doc, output_format=fmt, url=url,
                         stream=parse_bool(fields.get("stream"), "stream", False),
                         return_pictures=keep, describe_pictures=describe)


# ------------------------------------------------------------------ the response (documented)

class OcrReport(BaseModel):
    """Which OCR engine read which pages of this conversion."""
    engine: str = Field(description="the OCR engine that ran: rapidocr")
    pages: list[int] = Field(description="the converted pages whose text came from OCR")


class ConvertedPageBody(BaseModel):
    page: int
    markdown: str
    pictures: int
    tables: int
    ms: float
    ocr: bool = Field(description="this page's text came from OCR")
    json_: dict | None = Field(None, alias="json", description="output_format json only")
    picture_urls: list[str] | None = Field(None, description="return_pictures only")


class DocumentBody(BaseModel):
    """A conversion's result (the stream's last event, with pages empty)."""
    object: Literal["document"]
    model: str
    filename: str | None
    format: str
    pipeline: str = Field(description="native | layout | simple | ocr: what converted it "
                          "(ocr: an image read by OCR alone, without docling's layout model)")
    page_count: int
    pages: list[ConvertedPageBody]
    markdown: str
    usage: dict
    ocr: OcrReport | None = Field(description="null when no page went through OCR")
    ocr_engine: str | None = Field(description="the OCR engine this server has for such "
                                   "pages (null: none is installed)")
    layout_model: bool = Field(description="docling's layout model converted it (false: "
                               "no package ships it; PDFs convert from their text layer)")
    warning: str | None = Field(description="what this conversion could not do here, for "
                                "people (null when nothing is missing)")
    hypnos_telemetry: dict
    id: str | None = Field(None, description="return_pictures only")
    pictures_expire_at: str | None = Field(None, description="return_pictures only")
