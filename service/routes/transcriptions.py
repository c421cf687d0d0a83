"""POST /v1/audio/transcriptions (spec 9) and the live route GET /v1/audio/stream.

The HTTP route reads a multipart upload (what the OpenAI SDKs send) or a JSON body with the
audio as ``audio_bytes``, takes one lease on a speech_to_text model, and renders one of the
OpenAI response formats: json, text, verbose_json, srt, vtt. The WebSocket session lives in
`live_transcription` (protocol in docs/live-transcription.md); both use
`wire.transcription` (hotwords, language) and `inference.transcription` (one leased call).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request, Websocket
from sanic.request import RequestParameters
from sanic.response import json as json_response
from sanic.response import text as text_response

from hypnos.engines.records import TranscribeRequest, TranscribeResult
from hypnos.service import errors
from hypnos.service.inference.transcription import Transcription, transcribe
from hypnos.service.inference.live import LiveSession
from hypnos.service.observe.record import record_of
from hypnos.service.wire.transcription import LANGUAGE_SCHEMA, parse_hotwords, parse_language
from hypnos.service.wire.body import deadline_ms, json_body
from hypnos.service.wire.model import Says, Wire, validate
from hypnos.service.http.openapi import ANY_OBJECT, INFERENCE_ERRORS, endpoint, needs_ready
from hypnos.service.state import state_of
from hypnos.service.config.schema import LimitsConfig

bp = Blueprint("transcriptions")

LIVE_PATH = "/v1/audio/stream"
FORMATS = ("json", "text", "verbose_json", "srt", "vtt")

@dataclass
class TranscriptionParams:
    model: str
    audio: bytes
    filename: str | None = None
    language: str | None = None
    prompt: str | None = None
    hotwords: tuple[str, ...] = ()
    response_format: str = "json"
    audio_param: str = "file"           # the field the audio came in (errors name it)


# ------------------------------------------------------------------ parsing

def _text_field(value: object, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise errors.InvalidRequest(f"'{name}' must be a string", param=name)
    return value


def _common(fields: dict, audio: bytes, filename: str | None) -> TranscriptionParams:
    model = _text_field(fields.get("model"), "model")
    if not model:
        raise errors.InvalidRequest("'model' is required: a model serving speech_to_text",
                                    param="model")
    fmt = _text_field(fields.get("response_format"), "response_format") or "json"
    if fmt not in FORMATS:
        raise errors.InvalidRequest(f"response_format {fmt!r} is not one of "
                                    f"{', '.join(FORMATS)}", param="response_format")
    return TranscriptionParams(
        model=model, audio=audio, filename=filename, response_format=fmt,
        language=parse_language(_text_field(fields.get("language"), "language")),
        prompt=_text_field(fields.get("prompt"), "prompt"),
        hotwords=tuple(parse_hotwords(fields.get("hotwords"))))


def _check_size(size: int, limits: LimitsConfig, param: str) -> None:
    if size > limits.max_audio_bytes:
        raise errors.InvalidRequest(
            f"The audio is {size} bytes; max_audio_bytes is {limits.max_audio_bytes}",
            param=param)


SINGLE_FIELDS = ("model", "response_format", "language", "prompt")


def parse_multipart(request: Request, limits: LimitsConfig) -> TranscriptionParams:
    upload = request.files.get("file") if request.files else None
    if upload is None:
        raise errors.InvalidRequest("The multipart body has no 'file' part", param="file")
    form = request.form or RequestParameters()
    for name, parts in (("file", request.files), *((f, form) for f in SINGLE_FIELDS)):
        if parts and len(parts.getlist(name) or ()) > 1:
            raise errors.InvalidRequest(f"The multipart body has more than one '{name}' part",
                                        param=name)
    _check_size(len(upload.body), limits, "file")
    fields = {k: form.get(k) for k in SINGLE_FIELDS}
    fields["hotwords"] = form.getlist("hotwords") + form.getlist("hotwords[]") if form else None
    return _common(fields, upload.body, upload.name or None)


class TranscriptionBody(Wire):
    """The JSON form of a transcription: the audio file's bytes as an array of integers.
    The multipart form (TRANSCRIPTION_FORM) carries the same fields as parts."""
    audio_bytes: Annotated[
        list[Annotated[int, Field(ge=0, le=255),
                       Says("'audio_bytes' must hold integers from 0 to 255")]],
        Field(min_length=1),
        Says("'audio_bytes' must be a non-empty array of byte values (or send "
             "multipart/form-data with a 'file' part)")]
    model: Annotated[str, Field(min_length=1),
                     Says("'model' is required: a model serving speech_to_text")]
    filename: str | None = None
    response_format: Annotated[Literal["json", "text", "verbose_json", "srt", "vtt"], Says(
        "response_format {got} is not one of " + ", ".join(FORMATS))] | None = None
    # The pattern is published; parse_language enforces it (for the form and the socket too).
    language: Annotated[str, Field(json_schema_extra={"pattern": LANGUAGE_SCHEMA["pattern"]}),
                        Says("'language' must be a string")] | None = None
    prompt: str | None = None
    hotwords: str | list[str] | None = None


def parse_json(body: dict, limits: LimitsConfig) -> TranscriptionParams:
    wire = validate(TranscriptionBody, body)
    _check_size(len(wire.audio_bytes), limits, "audio_bytes")
    params = _common(wire.model_dump(), bytes(wire.audio_bytes), wire.filename or None)
    params.audio_param = "audio_bytes"
    return params


def parse_request(request: Request) -> TranscriptionParams:
    limits = state_of(request).config.limits
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("multipart/form-data"):
        return parse_multipart(request, limits)
    return parse_json(json_body(request), limits)



# ------------------------------------------------------------------ rendering

def _clock(secs: float, sep: str) -> str:
    ms = max(0, round(secs * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def render_srt(result: TranscribeResult) -> str:
    blocks = [f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text}\n"
              for i, s in enumerate(result.segments, 1)]
    return "\n".join(blocks)


def render_vtt(result: TranscribeResult) -> str:
    blocks = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text}\n"
              for s in result.segments]
    return "WEBVTT\n\n" + "\n".join(blocks)


def render(params: TranscriptionParams, done: Transcription) -> HTTPResponse:
    """The response for ``params.response_format``; non-JSON formats carry the telemetry as
    x-hypnos-* headers (as speech does)."""
    r: TranscribeResult = done.result
    fmt = params.response_format
    if fmt == "text":
        return text_response(r.text + "\n", headers=done.headers)
    if fmt == "srt":
        return text_response(render_srt(r), headers=done.headers)
    if fmt == "vtt":
        return text_response(render_vtt(r), content_type="text/vtt; charset=utf-8",
                             headers=done.headers)
    if fmt == "verbose_json":
        body = {"task": "transcribe", "language": r.language,
                "duration": round(r.duration_secs, 3), "text": r.text,
                "segments": [{"id": i, "start": s.start, "end": s.end, "text": s.text}
                             for i, s in enumerate(r.segments)],
                "hypnos_telemetry": done.telemetry}
        return json_response(body, headers=done.wait_headers)
    body = {"text": r.text, "duration_secs": round(r.duration_secs, 3)}
    if params.language:
        body["language"] = params.language
    body["hypnos_telemetry"] = done.telemetry
    return json_response(body, headers=done.wait_headers)


# ------------------------------------------------------------------ routes

_FIELDS = {"model": {"type": "string", "minLength": 1}, "response_format": {"enum": list(FORMATS)},
           "language": LANGUAGE_SCHEMA, "prompt": {"type": "string"}}
TRANSCRIPTION_FORM = {"type": "object", "required": ["file", "model"], "properties": {
    "file": {"type": "string", "contentMediaType": "application/octet-stream", "minLength": 1},
    "hotwords": {"type": "string"}, **_FIELDS}}


@bp.post("/v1/audio/transcriptions")
@needs_ready
@endpoint("Transcription (OpenAI-compatible): a multipart upload, or JSON with audio_bytes",
          body=TranscriptionBody, form=TRANSCRIPTION_FORM, errors=INFERENCE_ERRORS,
          ok={"application/json": ANY_OBJECT, "text/plain": {"type": "string"},
              "text/vtt": {"type": "string"}})
async def transcriptions(request: Request) -> HTTPResponse:
    params = parse_request(request)
    req = TranscribeRequest(audio=params.audio, language=params.language,
                            prompt=params.prompt, hotwords=list(params.hotwords),
                            filename=params.filename,
                            timestamps=params.response_format in ("verbose_json", "srt", "vtt"))
    done = await transcribe(state_of(request).scheduler, params.model, req,
                            deadline_ms=deadline_ms(request), audio_param=params.audio_param)
    record_of(request).transcription(done.result)
    return render(params, done)


# Sanic's Blueprint.websocket has no annotations (mypy: it makes the handler untyped).
@bp.websocket(LIVE_PATH, name="audio_stream")  # type: ignore[untyped-decorator]
@needs_ready
@endpoint("Live transcription over a WebSocket (docs/live-transcription.md)", websocket=True,
          ok={}, query={"model": {"type": "string"}})
async def audio_stream(request: Request, ws: Websocket) -> None:
    """GET /v1/audio/stream. Returns when the session ends (done, error, or hang-up)."""
    app = state_of(request)
    await LiveSession(app.scheduler, app.config.limits, ws).run()
