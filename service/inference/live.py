"""Live transcription over a WebSocket: the session behind GET /v1/audio/stream (protocol in
docs/live-transcription.md; the route is registered by `route_transcriptions`).

A session reads a JSON opening frame, then binary PCM frames. An energy VAD (`EnergyVad`,
pure) cuts the stream into utterances at pauses; each utterance is transcribed under its own
scheduler lease, so the model can be evicted between utterances, never during one. One worker
task per session runs the transcriptions in order, so frames arrive in order; a partial is
only started when the worker is idle, and dropped when newer work is waiting.

Ahead of the final: once a pause has fixed where the utterance would end (`EnergyVad.settled`,
``post_pad`` after its last voiced frame; the final is cut only at ``silence_ms``), that audio
is transcribed at once, as a partial, and a final of the very same samples takes its text
instead of asking the model again. Speech that resumes makes it an ordinary partial. The
periodic partials hold back once the speaker has been quiet for ``PAUSING_MS``, so the
worker is free when the pause fixes the utterance.

Threading: everything here runs on the event loop; the engine call runs in a worker thread.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from sanic.exceptions import WebsocketClosed
from websockets.exceptions import ConnectionClosed

from hypnos.engines.records import TranscribeRequest
from hypnos.service import errors
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.media.audio_frames import EnergyVad, PcmReader, SampleBuffer, wav_bytes
from hypnos.service.inference.capabilities import TRANSCRIPTION, require
from hypnos.service.inference.transcription import Transcription, transcribe
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.wire import json_text
from hypnos.service.wire.transcription import parse_hotwords, parse_language

log = logging.getLogger("hypnos.live")

# [limits] keys read when the config has them (these defaults otherwise).
LIVE_LIMITS = {"live_max_session_secs": 600.0, "live_idle_timeout_secs": 30.0,
               "live_max_utterance_secs": 30.0}
PARTIAL_EVERY_SECS = 1.0
# No periodic partial once the speaker has been quiet this long: the pause's own transcription
# (``_maybe_settled``) is due, and a partial of nearly the same audio would hold the worker.
PAUSING_MS = 150
FORMATS = ("pcm16", "f32")
GONE = (ConnectionClosed, WebsocketClosed)


@dataclass(frozen=True)
class LiveOptions:
    """The opening frame."""
    model: str
    language: str | None = None
    sample_rate: int = 16000
    format: str = "pcm16"
    prompt: str | None = None
    hotwords: tuple[str, ...] = ()
    partials: bool = True
    silence_ms: int = 500


def _int_field(body: dict, name: str, default: int, lo: int, hi: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise errors.InvalidRequest(f"'{name}' must be an integer from {lo} to {hi}",
                                    param=name)
    return value


def _str_field(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise errors.InvalidRequest(f"'{name}' must be a string", param=name)
    return value or None


def parse_opening(frame: object) -> LiveOptions:
    """The opening frame as options; a 400-style error naming the field otherwise."""
    body = json_text.loads(frame, "The first frame") if isinstance(frame, str) else None
    if not isinstance(body, dict):
        raise errors.InvalidRequest('The first frame must be a JSON text frame such as '
                                    '{"model": "whisper", "sample_rate": 16000}')
    model = _str_field(body, "model")
    if not model:
        raise errors.InvalidRequest("'model' is required: a model serving speech_to_text",
                                    param="model")
    fmt = body.get("format", "pcm16")
    if fmt not in FORMATS:
        raise errors.InvalidRequest(f"'format' must be one of {', '.join(FORMATS)}",
                                    param="format")
    partials = body.get("partials", True)
    if not isinstance(partials, bool):
        raise errors.InvalidRequest("'partials' must be true or false", param="partials")
    return LiveOptions(
        model=model, language=parse_language(_str_field(body, "language")),
        sample_rate=_int_field(body, "sample_rate", 16000, 8000, 48000), format=fmt,
        prompt=_str_field(body, "prompt"), hotwords=tuple(parse_hotwords(body.get("hotwords"))),
        partials=partials, silence_ms=_int_field(body, "silence_ms", 500, 200, 5000))


class SessionEnd(Exception):
    """Ends a session: an error frame, then a close with ``close_code``."""

    def __init__(self, code: str, message: str, *, param: str | None = None,
                 close_code: int = 1008):
        super().__init__(message)
        self.code, self.message, self.param, self.close_code = code, message, param, close_code


@dataclass
class Job:
    kind: str              # partial | settled (a partial a final may reuse) | final
    id: int                # the utterance
    start: int             # sample indices in the session's stream
    end: int
    samples: np.ndarray


class LiveSession:
    """One WebSocket session. ``run()`` returns when it is over."""

    def __init__(self, sched: Scheduler, limits: LimitsConfig, ws: Any):
        """``sched`` and ``limits`` (config.limits): the app's, passed in by the route."""
        self.ws = ws
        self.sched = sched
        self.max_session, self.idle, self.max_utterance = (
            float(getattr(limits, key, default)) for key, default in LIVE_LIMITS.items())
        self.opened = time.monotonic()
        self.send_lock = asyncio.Lock()
        self.jobs: asyncio.Queue[Job] = asyncio.Queue()
        self.running = False
        self.worker: asyncio.Task | None = None
        self.opts: LiveOptions | None = None
        self.vad: EnergyVad | None = None
        self.reader: PcmReader | None = None
        self.buffer = SampleBuffer()
        self.received = 0             # samples
        self.utterance = 0            # id of the utterance in progress
        self.partial_at = 0           # sample index the last partial ran to
        self.settled: tuple[int, int, int] | None = None   # (id, start, end) asked ahead
        self.ahead: tuple[tuple[int, int, int], Transcription] | None = None  # key, result

    async def run(self) -> None:
        try:
            if await self._open():
                await self._pump()
        except SessionEnd as end:
            await self._fail(end)
        except GONE:
            pass
        finally:
            if self.worker is not None:
                self.worker.cancel()            # a running engine call stops at its next
                await asyncio.wait({self.worker})   # segment; its lease ends after that
            log.info("live session ended: %.1f s of audio, %d utterances",
                     self.received / (self.opts.sample_rate if self.opts else 1), self.utterance)

    # ---------------------------------------------------------------- receiving

    async def _recv(self) -> str | bytes | None:
        """The next frame; None when the client hung up. Raises SessionEnd on a limit."""
        left = self.opened + self.max_session - time.monotonic()
        try:
            return await asyncio.wait_for(self.ws.recv(), max(0.0, min(self.idle, left)))
        except TimeoutError:
            if left <= self.idle:
                await self._limit("session_limit", "The session reached "
                                  f"live_max_session_secs ({self.max_session:g} s)")
            raise SessionEnd("idle_timeout", f"No frame for {self.idle:g} s "
                             "(live_idle_timeout_secs)") from None

    async def _open(self) -> bool:
        frame = await self._recv()
        if frame is None:
            return False
        try:
            o = self.opts = parse_opening(frame)
            require(self.sched, o.model, TRANSCRIPTION)
        except errors.HypnosError as exc:
            raise SessionEnd(exc.type, exc.message, param=exc.param) from None
        self.reader = PcmReader(o.format)
        self.vad = EnergyVad(o.sample_rate, silence_ms=o.silence_ms,
                             max_utterance_secs=self.max_utterance)
        self.worker = asyncio.create_task(self._work())
        await self._send({"type": "ready", "model": o.model, "sample_rate": o.sample_rate,
                          "format": o.format, "silence_ms": o.silence_ms,
                          "max_session_secs": self.max_session,
                          "idle_timeout_secs": self.idle})
        return True

    def _opened(self) -> tuple[LiveOptions, PcmReader, EnergyVad]:
        """The opening's options, reader and VAD (set by ``_open``, before any audio)."""
        assert self.opts is not None and self.reader is not None and self.vad is not None
        return self.opts, self.reader, self.vad

    async def _pump(self) -> None:
        opts = self._opened()[0]
        while True:
            frame = await self._recv()
            if frame is None:
                return
            if isinstance(frame, (bytes, bytearray, memoryview)):
                self._on_audio(bytes(frame))
                if self.received > self.max_session * opts.sample_rate:
                    await self._limit("session_limit", "The session sent more than "
                                      f"live_max_session_secs ({self.max_session:g} s) of audio")
                continue
            if _control_type(frame) != "end":
                raise SessionEnd("invalid_request_error", "Unknown control frame; send "
                                 'binary audio frames or {"type": "end"}')
            self._flush()
            await self.jobs.join()
            await self._send({"type": "done"})
            await self.ws.close(1000, "done")
            return

    def _on_audio(self, data: bytes) -> None:
        _, reader, vad = self._opened()
        samples = reader.push(data)
        self.received += len(samples)
        self.buffer.append(samples)
        for start, end in vad.push(samples):
            self._submit("final", start, end)
        self._maybe_settled()
        self._maybe_partial()
        self.buffer.trim(vad.keep_from())

    def _maybe_partial(self) -> None:
        opts, _, vad = self._opened()
        start, now = vad.start, vad.position
        if not opts.partials or start is None or self.running or not self.jobs.empty() or \
                vad.quiet() >= PAUSING_MS * opts.sample_rate // 1000:
            return          # start is None: not speaking
        if now - max(start, self.partial_at) >= PARTIAL_EVERY_SECS * opts.sample_rate:
            self.partial_at = now
            self._submit("partial", start, now)

    def _maybe_settled(self) -> None:
        """Transcribe the utterance as a pause has fixed it, if the worker is idle."""
        cut = self._opened()[2].settled()
        if cut is None or self.running or not self.jobs.empty() or \
                self.settled == (self.utterance, *cut):
            return
        self.settled = (self.utterance, *cut)
        self._submit("settled", *cut)

    def _submit(self, kind: str, start: int, end: int) -> None:
        self.jobs.put_nowait(Job(kind, self.utterance, start, end,
                                 self.buffer.slice(start, end)))
        if kind == "final":
            self.utterance += 1
            self.partial_at = 0

    def _flush(self) -> None:
        cut = self.vad.flush() if self.vad is not None else None
        if cut is not None:
            self._submit("final", *cut)

    async def _limit(self, code: str, message: str) -> None:
        """Transcribe what was said, then end the session with ``code``."""
        if self.vad is not None:
            self._flush()
            await self.jobs.join()
        raise SessionEnd(code, message)

    # ---------------------------------------------------------------- transcribing

    async def _work(self) -> None:
        while True:
            job = await self.jobs.get()
            self.running = True
            try:
                if job.kind == "final" or self.jobs.empty():   # stale partials are dropped
                    await self._transcribe(job)
            except GONE:
                pass                      # the receive loop notices the hang-up
            except Exception:  # noqa: BLE001 - one failed utterance must not end the session
                log.exception("live transcription of utterance %d failed", job.id)
            finally:
                self.running = False
                self.jobs.task_done()

    async def _transcribe(self, job: Job) -> None:
        o = self._opened()[0]
        # The frames carry the VAD's times, not whisper's segments: a short utterance is
        # read in whisper's short window (about half the time; engines/whisper.py).
        req = TranscribeRequest(audio=wav_bytes(job.samples, o.sample_rate),
                                language=o.language, prompt=o.prompt, hotwords=list(o.hotwords),
                                timestamps=False)
        span = {"id": job.id, "start": round(job.start / o.sample_rate, 3),
                "end": round(job.end / o.sample_rate, 3)}
        key = (job.id, job.start, job.end)
        try:
            if job.kind == "final" and self.ahead is not None and self.ahead[0] == key:
                done = self.ahead[1]            # the same samples, transcribed at the pause
            else:
                done = await transcribe(self.sched, o.model, req)
        except errors.HypnosError as exc:
            if job.kind == "settled":
                return                          # its final asks again, and reports
            # The utterance is lost (model busy, cannot load...); the session goes on.
            await self._send({"type": "error", "code": exc.type, "message": exc.message,
                              **span})
            return
        if job.kind == "settled":
            self.ahead = (key, done)
            if not o.partials:
                return
        elif job.kind == "final":
            self.ahead = None
        kind = "partial" if job.kind == "settled" else job.kind
        frame = {"type": kind, "text": done.result.text, **span}
        if job.kind == "final":
            frame["hypnos_telemetry"] = done.telemetry
        await self._send(frame)

    # ---------------------------------------------------------------- sending

    async def _send(self, frame: dict) -> None:
        async with self.send_lock:
            await self.ws.send(json.dumps(frame, ensure_ascii=False))

    async def _fail(self, end: SessionEnd) -> None:
        frame = {"type": "error", "code": end.code, "message": end.message}
        if end.param:
            frame["param"] = end.param
        try:
            await self._send(frame)
            await self.ws.close(end.close_code, end.code)
        except GONE:
            pass


def _control_type(frame: Any) -> str | None:
    try:
        body = json.loads(frame)
    except (TypeError, ValueError):
        return None
    return body.get("type") if isinstance(body, dict) else None
