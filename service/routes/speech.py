"""POST /v1/audio/speech (spec section 10): audio bytes, or a chunked audio stream.

The body is the audio itself; telemetry travels as x-hypnos-* headers (spec section 5).
Formats: wav (16-bit mono PCM at the engine's rate) and pcm (the same samples, no header)
always; flac, mp3, opus (Ogg) and aac (ADTS) are encoded with PyAV's bundled FFmpeg when it
has the encoder, and fall back to WAV (Content-Type audio/wav) when it has not. A stream
sends wav or pcm only: the other formats stream as WAV.

The request's record (`observe.record`) gets the engine's time to first audio and the
seconds of audio made, for the metrics.
"""
from __future__ import annotations

import asyncio
import io
import logging
import struct
import time
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import raw

from hypnos.engines.records import SpeechRequest
from hypnos.service import errors
from hypnos.service.http.caller import caller_of
from hypnos.service.inference.capabilities import SPEECH
from hypnos.service.inference.leased import leased
from hypnos.service.wire.body import json_body
from hypnos.service.observe.record import record_of
from hypnos.service.observe.telemetry import telemetry_headers
from hypnos.service.wire.model import Says, Wire, validate
from hypnos.service.http.openapi import INFERENCE_ERRORS, endpoint, needs_ready
from hypnos.service.state import state_of
from hypnos.service.inference.leased import LeasedCall
from collections.abc import Callable

log = logging.getLogger(__name__)
bp = Blueprint("speech")

MIN_SPEED, MAX_SPEED = 0.25, 4.0
CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac",
                 "mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac"}
# format -> (PyAV container, FFmpeg encoder)
ENCODERS = {"flac": ("flac", "flac"), "mp3": ("mp3", "libmp3lame"),
            "opus": ("ogg", "libopus"), "aac": ("adts", "aac")}
OPEN_ENDED = 0xFFFFFFFF      # WAV length fields of a stream whose length is not known


# ------------------------------------------------------------------ request

@dataclass
class SpeechParams:
    model: str
    request: SpeechRequest
    response_format: str = "wav"
    stream: bool = False


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


class SpeechBody(Wire):
    """Unknown fields are ignored; ``response_format`` is read case-blind."""
    model: Annotated[str, Field(min_length=1)]
    input: Annotated[str, Field(pattern=r"\S"), Says("'input' is empty; send the text to speak",
                                                      on=("string_pattern_mismatch",))]
    voice: str | None = None
    language: str | None = None
    response_format: Annotated[Literal["wav", "pcm", "flac", "mp3", "opus", "aac"],
                               BeforeValidator(_lower)] | None = None
    stream: Annotated[bool, Says("'stream' must be true or false")] | None = None
    speed: Annotated[float, Field(ge=MIN_SPEED, le=MAX_SPEED),
                     Says(f"'speed' must be a number from {MIN_SPEED} to {MAX_SPEED}, "
                          "got {got}")] | None = None


def parse_speech(body: dict, max_prompt_chars: int) -> SpeechParams:
    """The typed request, or a 400 naming the field."""
    wire = validate(SpeechBody, body)
    if len(wire.input) > max_prompt_chars:
        raise errors.InvalidRequest(f"'input' holds {len(wire.input)} characters, above "
                                    f"max_prompt_chars ({max_prompt_chars})", param="input")
    req = SpeechRequest(text=wire.input, voice=wire.voice or "alloy",
                        speed=1.0 if wire.speed is None else float(wire.speed),
                        language=wire.language or "en")
    return SpeechParams(model=wire.model, request=req,
                        response_format=wire.response_format or "wav",
                        stream=bool(wire.stream))


# -------------------------------------------------------------------- audio

def wav_header(rate: int, data_bytes: int | None) -> bytes:
    """A 44-byte header for 16-bit mono PCM; ``data_bytes=None`` declares an open-ended
    stream (both length fields 0xFFFFFFFF)."""
    riff = OPEN_ENDED if data_bytes is None else 36 + data_bytes
    data = OPEN_ENDED if data_bytes is None else data_bytes
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1,
                       rate, rate * 2, 2, 16, b"data", data)


def _encode_av(pcm: bytes, rate: int, fmt: str) -> bytes:
    import av
    import numpy as np
    container, codec = ENCODERS[fmt]
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        assert isinstance(stream, av.AudioStream)
        if pcm:
            frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm, "<i2").reshape(1, -1),
                                               format="s16", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def encode(pcm: bytes, rate: int, fmt: str) -> tuple[bytes, str]:
    """(body, content type) for 16-bit mono PCM in ``fmt``. Blocks (run it in a thread for
    the compressed formats). Falls back to WAV when PyAV or its encoder is missing."""
    if fmt == "pcm":
        return pcm, CONTENT_TYPES["pcm"]
    if fmt in ENCODERS:
        try:
            return _encode_av(pcm, rate, fmt), CONTENT_TYPES[fmt]
        except Exception as exc:  # noqa: BLE001 - ImportError or any FFmpeg error
            log.warning("cannot encode %s (%s); answering WAV", fmt, exc)
    return wav_header(rate, len(pcm)) + pcm, CONTENT_TYPES["wav"]


class _Audio:
    """The engine's ``on_audio``: called from the engine thread; keeps the chunks (or hands
    them to ``sink``) and when the first one came."""

    def __init__(self, sink: Callable[[bytes], object] | None = None):
        self.sink = sink
        self.chunks: list[bytes] = []
        self.started = time.monotonic()
        self.first: float | None = None

    def __call__(self, chunk: bytes) -> None:
        if self.first is None:
            self.first = time.monotonic()
        if self.sink is not None:
            self.sink(chunk)
        else:
            self.chunks.append(chunk)

    @property
    def ttfa_ms(self) -> float | None:
        return None if self.first is None else (self.first - self.started) * 1000



# ------------------------------------------------------------------- routes

@bp.post("/v1/audio/speech")
@needs_ready
@endpoint("Speech synthesis (OpenAI-compatible): audio bytes, chunked when stream is true",
          body=SpeechBody, errors=INFERENCE_ERRORS,
          ok={ctype: {"type": "string", "contentMediaType": ctype}
              for ctype in sorted(set(CONTENT_TYPES.values()))})
async def speech(request: Request) -> HTTPResponse | None:
    params = parse_speech(json_body(request), state_of(request).config.limits.max_prompt_chars)
    async with leased(caller_of(request), params.model, SPEECH, param="input") as call:
        if params.stream:
            return await _stream(request, params, call)
        audio = _Audio()
        secs = await call.run(call.speaker.synthesize, params.request, audio)
        inference_ms = (time.monotonic() - audio.started) * 1000
        rate = call.speaker.sample_rate
        body, content_type = await asyncio.to_thread(encode, b"".join(audio.chunks), rate,
                                                     params.response_format)
        record = record_of(request)
        record.ttfa_ms, record.audio_secs = audio.ttfa_ms, secs
        call.inference_ms = inference_ms
        headers = {**call.telemetry_headers(secs), **call.wait_headers()}
        return raw(body, content_type=content_type, headers=headers)


async def _stream(request: Request, params: SpeechParams,
                  call: LeasedCall) -> HTTPResponse | None:
    """Chunked audio as each phrase is made. Only the first three telemetry headers go out;
    a failure after the headers ends the body early (spec section 10)."""
    fmt = "pcm" if params.response_format == "pcm" else "wav"
    headers = telemetry_headers(call.lease, call.placement())
    response = await request.respond(
        content_type=CONTENT_TYPES[fmt],
        headers={**headers, **call.wait_headers(), "cache-control": "no-cache"})
    if fmt == "wav":
        await response.send(wav_header(call.speaker.sample_rate, None))
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    audio = _Audio(lambda chunk: loop.call_soon_threadsafe(queue.put_nowait, chunk))
    task = asyncio.ensure_future(call.run(call.speaker.synthesize, params.request, audio))
    task.add_done_callback(lambda _t: queue.put_nowait(None))
    try:
        while (chunk := await queue.get()) is not None:
            await response.send(chunk)
        record_of(request).audio_secs = task.result()
    except asyncio.CancelledError:
        call.cancel.set()
        await asyncio.wait({task})
        raise
    except Exception as exc:  # noqa: BLE001 - headers are out: the body just ends early
        log.warning("speech stream for %s ended early: %s", params.model, exc)
        call.cancel.set()
        await asyncio.wait({task})
    finally:
        record_of(request).ttfa_ms = audio.ttfa_ms
    await response.eof()
    return None     # the response went out through request.respond()
