"""POST /v1/audio/transcriptions (spec 9) and the live route GET /v1/audio/stream.

The HTTP route reads a multipart upload (what the OpenAI SDKs send) or a JSON body with the
audio as ``audio_bytes``, takes one lease on a speech_to_text model, and renders one of the
OpenAI response formats: json, text, verbose_json, srt, vtt. The WebSocket session lives in
`live_transcription` (protocol in docs/live-transcription.md), which uses the primitives
here (hotwords, language, model check, one leased engine call).
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass

from sanic import Blueprint, Request
from sanic.response import json as json_response
from sanic.response import text as text_response

from hypnos.engines.errors import AudioDecodeError, EngineError
from hypnos.engines.records import TranscribeRequest, TranscribeResult
from hypnos.service import errors
from hypnos.service.engine_call import run_engine
from hypnos.service.http import deadline_ms, json_body, origin_allowed, require_ready
from hypnos.service.telemetry import telemetry, telemetry_headers
from hypnos.service.openapi import ANY_OBJECT, INFERENCE_ERRORS, endpoint

bp = Blueprint("transcriptions")

LIVE_PATH = "/v1/audio/stream"
FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
MAX_HOTWORDS = 25

# ------------------------------------------------------------------ shared with the live route


def parse_hotwords(value) -> list[str]:
    """Terms from a comma list, a JSON list (as text or as JSON), or a list of either (one
    multipart part each). More than MAX_HOTWORDS is a 400."""
    items = value if isinstance(value, list) else [] if value in (None, "") else [value]
    words: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise errors.InvalidRequest("'hotwords' must be strings", param="hotwords")
        text = item.strip()
        if text.startswith("["):
            try:
                inner = json.loads(text)
            except ValueError:
                raise errors.InvalidRequest("'hotwords' starts with '[' but is not a JSON "
                                            "list of strings", param="hotwords") from None
            if not isinstance(inner, list) or not all(isinstance(w, str) for w in inner):
                raise errors.InvalidRequest("'hotwords' must be a JSON list of strings",
                                            param="hotwords")
            words += inner
        else:
            words += text.split(",")
    words = [w.strip() for w in words if w.strip()]
    if len(words) > MAX_HOTWORDS:
        raise errors.InvalidRequest(f"{len(words)} hotwords were sent; at most "
                                    f"{MAX_HOTWORDS} are accepted", param="hotwords")
    return words


def parse_language(value: str | None) -> str | None:
    """An ISO 639-1 (or 639-3) code, lowercased; "en-US" is read as "en"."""
    if value is None:
        return None
    code = re.split(r"[-_]", value.strip().lower(), maxsplit=1)[0]
    if not re.fullmatch(r"[a-z]{2,3}", code):
        raise errors.InvalidRequest(f"language {value!r} is not an ISO 639-1 code such as "
                                    "'en'", param="language")
    return code


def check_stt_model(sched, model_id: str):
    """The model's state; 404 when unknown or disabled, 400 when it does not transcribe."""
    st = sched.get(model_id)
    if "speech_to_text" not in st.cfg.all_modalities:
        raise errors.InvalidRequest(f"The model '{model_id}' does not serve speech_to_text "
                                    f"(its modality is {st.cfg.modality})", param="model")
    return st


@dataclass
class Transcription:
    result: TranscribeResult
    telemetry: dict
    headers: dict                     # x-hypnos-* telemetry headers + estimated wait
    wait_headers: dict



async def transcribe_leased(sched, model_id: str, req: TranscribeRequest, *,
                            deadline_ms: float | None = None,
                            audio_param: str = "file") -> Transcription:
    """One lease, one engine call. Raises HypnosError (400 naming ``audio_param`` for
    undecodable audio)."""
    async with sched.lease(model_id, deadline_ms=deadline_ms) as lease:
        engine = lease.engine
        if not callable(getattr(engine, "transcribe", None)):
            raise errors.InvalidRequest(
                f"The model '{model_id}' (engine {lease.model.cfg.engine}) has no "
                "transcription engine in this version of Hypnos", param="model")
        started = time.monotonic()
        try:
            result = await run_engine(engine.transcribe, req, cancel=threading.Event())
        except AudioDecodeError as exc:
            raise errors.InvalidRequest(f"The '{audio_param}' upload is not audio that can "
                                        f"be decoded: {exc}", param=audio_param) from None
        except EngineError as exc:
            raise errors.ServerError(f"The engine failed: {exc}") from None
        inference_ms = (time.monotonic() - started) * 1000
        placement = sched.placement_of(lease.model).to_wire()
    timings = {"audio_secs": round(result.duration_secs, 3)}
    if result.duration_secs > 0:
        timings["rtf"] = round(result.processing_ms / 1000 / result.duration_secs, 4)
    wait = ({} if lease.estimated_wait_ms is None
            else {"x-hypnos-estimated-wait-ms": f"{lease.estimated_wait_ms:.0f}"})
    headers = {**telemetry_headers(lease, placement, inference_ms, result.duration_secs),
               **wait}
    return Transcription(result, telemetry(lease, placement, inference_ms, timings),
                         headers, wait)


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

def _text_field(value, name: str) -> str | None:
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


def _check_size(size: int, limits, param: str) -> None:
    if size > limits.max_audio_bytes:
        raise errors.InvalidRequest(
            f"The audio is {size} bytes; max_audio_bytes is {limits.max_audio_bytes}",
            param=param)


SINGLE_FIELDS = ("model", "response_format", "language", "prompt")


def parse_multipart(request: Request, limits) -> TranscriptionParams:
    upload = request.files.get("file") if request.files else None
    if upload is None:
        raise errors.InvalidRequest("The multipart body has no 'file' part", param="file")
    form = request.form or {}
    for name, parts in (("file", request.files), *((f, form) for f in SINGLE_FIELDS)):
        if parts and len(parts.getlist(name) or ()) > 1:
            raise errors.InvalidRequest(f"The multipart body has more than one '{name}' part",
                                        param=name)
    _check_size(len(upload.body), limits, "file")
    fields = {k: form.get(k) for k in SINGLE_FIELDS}
    fields["hotwords"] = form.getlist("hotwords") + form.getlist("hotwords[]") if form else None
    return _common(fields, upload.body, upload.name or None)


def parse_json(body: dict, limits) -> TranscriptionParams:
    raw = body.get("audio_bytes")
    if not isinstance(raw, list) or not raw:
        raise errors.InvalidRequest("'audio_bytes' must be a non-empty array of byte values "
                                    "(or send multipart/form-data with a 'file' part)",
                                    param="audio_bytes")
    _check_size(len(raw), limits, "audio_bytes")
    try:
        audio = bytes(raw)
    except (TypeError, ValueError):
        raise errors.InvalidRequest("'audio_bytes' must hold integers from 0 to 255",
                                    param="audio_bytes") from None
    params = _common(body, audio, _text_field(body.get("filename"), "filename"))
    params.audio_param = "audio_bytes"
    return params


def parse_request(request: Request) -> TranscriptionParams:
    limits = request.app.ctx.config.limits
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


def render(params: TranscriptionParams, done) -> object:
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

_FIELDS = {"model": {"type": "string"}, "response_format": {"enum": list(FORMATS)},
           "language": {"type": "string"}, "prompt": {"type": "string"}}
TRANSCRIPTION_FORM = {"type": "object", "required": ["file", "model"], "properties": {
    "file": {"type": "string", "contentMediaType": "application/octet-stream"},
    "hotwords": {"type": "string"}, **_FIELDS}}
TRANSCRIPTION_JSON = {"type": "object", "required": ["audio_bytes"], "properties": {
    "audio_bytes": {"type": "array", "minItems": 1,
                    "items": {"type": "integer", "minimum": 0, "maximum": 255}},
    "filename": {"type": "string"}, **_FIELDS}}


@bp.post("/v1/audio/transcriptions")
@endpoint("Transcription (OpenAI-compatible): a multipart upload, or JSON with audio_bytes",
          body=TRANSCRIPTION_JSON, form=TRANSCRIPTION_FORM, errors=INFERENCE_ERRORS,
          ok={"application/json": ANY_OBJECT, "text/plain": {"type": "string"},
              "text/vtt": {"type": "string"}})
async def transcriptions(request: Request):
    require_ready(request)
    params = parse_request(request)
    check_stt_model(request.app.ctx.scheduler, params.model)
    req = TranscribeRequest(audio=params.audio, language=params.language,
                            prompt=params.prompt, hotwords=list(params.hotwords),
                            filename=params.filename)
    done = await transcribe_leased(request.app.ctx.scheduler, params.model, req,
                                   deadline_ms=deadline_ms(request),
                                   audio_param=params.audio_param)
    request.ctx.result = done.result
    return render(params, done)


@bp.on_request
async def guard_upgrade(request: Request):
    """Refuse a live upgrade from a foreign browser origin (403) or while staging (503)
    before the WebSocket handshake, as a plain HTTP answer. (API keys were checked by the
    HTTP layer already: /v1 paths, upgrades included.)"""
    if request.path != LIVE_PATH:
        return
    origin = request.headers.get("origin")
    if origin and not origin_allowed(origin, request.app.ctx.config.server.allowed_origins):
        raise errors.PermissionDenied(f"Origin {origin} may not open {LIVE_PATH} "
                                      "(server.allowed_origins)")
    require_ready(request)


@bp.websocket(LIVE_PATH, name="audio_stream")
@endpoint("Live transcription over a WebSocket (docs/live-transcription.md)", websocket=True,
          ok={}, query={"model": {"type": "string"}})
async def audio_stream(request: Request, ws):
    """GET /v1/audio/stream. Returns when the session ends (done, error, or hang-up)."""
    # Imported here: live_transcription imports this module's primitives.
    from hypnos.service.live_transcription import LiveSession
    await LiveSession(request, ws).run()
