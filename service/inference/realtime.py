"""A Realtime session (GET /v1/realtime, OpenAI's Realtime protocol over a WebSocket): the
client's events are read one at a time, in order; audio (24 kHz pcm16, or 8 kHz G.711, as
the session's input format says) is kept in the input buffer as 16-bit PCM at its own rate,
cut into turns by the server VAD (`media.turn_vad`) or committed by the client, transcribed
by the pool's speech_to_text model (`realtime_hearing`, with partial transcripts while the
user speaks), and answered by a `realtime_response.Response` (chat, then speech sentence by
sentence). ``rate_limits.updated`` reports the key's limits (``SessionDeps.rate_limits``).

A bad event is answered with an ``error`` event naming the client's ``event_id``; the socket
stays open. The session ends when the client hangs up, or after ``realtime_idle_timeout_secs``
with no event while no answer or transcription is being made (an ``error`` event
``idle_timeout``, then a close).

Threading: the event loop. One task reads; the response and each transcription run as their
own tasks; sends are serialised by one lock, so each frame goes out whole. The server VAD
computes in `VAD_THREADS`, awaited by the reading task (so events stay in order): the loop
never waits for it, and it never queues behind a model's load in the default executor.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sanic.exceptions import WebsocketClosed
from websockets.exceptions import ConnectionClosed

from hypnos.service.errors import HypnosError, InvalidRequest
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.realtime_book import SessionInfo
from hypnos.service.inference.realtime_conversation import Conversation
from hypnos.service.inference.realtime_hearing import Hearing, check_transcriber
from hypnos.service.inference.realtime_response import Response, Voices
from hypnos.service.media.realtime_audio import InputBuffer, decode_event_audio_yielding
from hypnos.service.media.turn_vad import SpeechTurns, TurnDetector, prepare
from hypnos.service.wire.realtime_in import (FORMAT_RATES, Settings, apply_settings,
                                             item_audio, new_id, parse_event, parse_item)
from hypnos.service.wire.realtime_out import (error_event, event, item_added, item_done,
                                              rate_limits_event)
from hypnos.service.wire.transcript_deltas import TranscriptDeltas

log = logging.getLogger("hypnos.realtime")
GONE = (ConnectionClosed, WebsocketClosed)
MIN_COMMIT_MS = 100                 # OpenAI's least committable buffer
IDLE_KEEP_MS = 2000                 # audio kept before speech while the VAD waits
PAUSE_MS = 200                      # quiet after which the speech so far is transcribed
VAD_THREADS = ThreadPoolExecutor(2, thread_name_prefix="hypnos-vad")


@dataclass(frozen=True)
class SessionDeps:
    """What the route hands a session: its models, its limits, a Caller per call."""
    voices: Voices
    transcriber: str | None         # the pool's speech_to_text model
    caller: Callable[[], Caller]
    idle_secs: float
    max_buffer_secs: float
    # Records a timed span (name, started, finished; time.monotonic()) as a workflow.
    timed: Callable[[str, float, float], None] = lambda _n, _s, _f: None
    # The key's rate limits as rate_limits.updated lists them, given the tokens this session
    # used that are not charged yet (they are when it ends); [] when no limit applies.
    rate_limits: Callable[[int], list[dict]] = lambda _unbilled: []


class RealtimeSession:
    def __init__(self, ws: Any, deps: SessionDeps, info: SessionInfo):
        self.ws, self.deps, self.info = ws, deps, info
        self.settings = Settings()
        self.conversation = Conversation()
        self.buffer = InputBuffer(FORMAT_RATES[self.settings.input_format])
        self.vad: SpeechTurns | None = None
        self.speech_item: str | None = None     # the item the VAD's current speech will be
        self.response: tuple[asyncio.Task, Response] | None = None
        self.hearing = Hearing(deps.caller, self.send)
        self.turn_end_at: float | None = None   # the last commit (the user's turn's end)
        self.send_lock = asyncio.Lock()

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        asyncio.get_running_loop().run_in_executor(VAD_THREADS, prepare)   # ahead of audio
        try:
            await self.send(event("session.created", session=self._session()))
            while (frame := await self._recv()) is not None:
                await self._one(frame)
        except GONE:
            pass
        finally:
            await self._stop_all()

    async def _recv(self) -> str | bytes | None:
        """The next frame; None once the session was idle too long (and closed). Sanic's
        own timeout (None when it passed): a cancelled recv would leave its socket unable
        to read again."""
        while (frame := await self.ws.recv(timeout=self.deps.idle_secs)) is None:
            if not self._busy():
                break
        if frame is not None:
            return frame
        await self.send(error_event(f"No event for {self.deps.idle_secs:g} s "
                                    "(limits.realtime_idle_timeout_secs)",
                                    code="idle_timeout"))
        await self.ws.close(1000, "idle_timeout")
        return None

    def _busy(self) -> bool:
        """Whether an answer or a transcription is being made (a client waiting for it is
        not idle)."""
        return self.response is not None or bool(self.hearing.finals)

    async def _one(self, frame: str | bytes) -> None:
        event_id = None
        try:
            ev = parse_event(frame)
            event_id = ev.get("event_id") if isinstance(ev.get("event_id"), str) else None
            handler = HANDLERS.get(ev["type"])
            if handler is None:
                raise InvalidRequest(f"Unknown event type '{ev['type']}'", param="type",
                                     code="invalid_value")
            await handler(self, ev)
        except HypnosError as exc:
            await self.send(error_event(exc.message, kind=exc.type, code=exc.code,
                                        param=exc.param, event_id=event_id))
        except GONE:
            raise
        except Exception:  # noqa: BLE001 - a bug in one event's handling keeps the socket
            log.exception("realtime event failed")
            await self.send(error_event("The server failed on this event (its log says why)",
                                        kind="server_error", event_id=event_id))

    async def send(self, frame: str) -> None:
        async with self.send_lock:
            await self.ws.send(frame)

    def _session(self) -> dict:
        s = self.settings.session_wire(self.deps.voices.chat)
        s["audio"]["input"]["transcription"] = {
            "model": self.settings.transcription or self.deps.transcriber or "none"}
        return s

    async def _stop_all(self) -> None:
        if self.response is not None:
            self.response[0].cancel()
            await asyncio.wait({self.response[0]})
        await self.hearing.stop()

    def _unbilled(self) -> int:
        return self.info.tokens_in + self.info.tokens_out

    # ------------------------------------------------------------------ session

    async def _session_update(self, ev: dict) -> None:
        body = ev.get("session")
        if not isinstance(body, dict):
            raise InvalidRequest("'session' must be an object", param="session")
        before = self.settings
        settings = apply_settings(self.settings, body, "session")
        if settings.transcription not in (None, before.transcription):
            check_transcriber(self.deps.caller().sched, settings.transcription, body)
        self.settings = settings
        if self.settings.input_format != before.input_format:
            self.buffer.convert(FORMAT_RATES[self.settings.input_format])
        if (self.settings.vad, self.settings.input_format) != (before.vad, before.input_format):
            self.vad = None                 # rebuilt with the new settings on the next audio
        await self.send(event("session.updated", session=self._session()))

    # ------------------------------------------------------------------ the input buffer

    async def _append(self, ev: dict) -> None:
        pcm = await decode_event_audio_yielding(ev.get("audio"),
                                               self.settings.input_format, "audio")
        buf = self.buffer
        if buf.ms(len(buf.data) + len(pcm)) > self.deps.max_buffer_secs * 1000:
            raise InvalidRequest(
                f"The input audio buffer would hold more than {self.deps.max_buffer_secs:g} s "
                "(limits.realtime_max_buffer_secs); commit or clear it", param="audio",
                code="input_audio_buffer_full")
        start = buf.received_ms
        buf.append(pcm)
        self.info.buffered_ms = buf.held_ms
        if self.settings.vad is not None:
            await self._detect(pcm, start)
            if self.speech_item is not None:
                self.hearing.listen(self._stt(), buf, responding=self.response is not None,
                                    quiet_ms=self.vad.detector.quiet_ms() if self.vad else 0)

    def _stt(self) -> str | None:
        """The session's speech_to_text model."""
        return self.settings.transcription or self.deps.transcriber

    async def _detect(self, pcm: bytes, start_ms: float) -> None:
        vad = self.settings.vad
        assert vad is not None
        loop = asyncio.get_running_loop()
        if self.vad is None:
            detector = TurnDetector(vad.threshold, vad.silence_ms, vad.prefix_ms,
                                    pause_ms=PAUSE_MS)
            self.vad = await loop.run_in_executor(VAD_THREADS, SpeechTurns, self.buffer.rate,
                                                  detector, start_ms)
        for turn in await loop.run_in_executor(VAD_THREADS, self.vad.push, pcm):
            if turn.kind == "started":
                await self._speech_started(turn.ms)
            elif turn.kind == "paused":
                buf = self.buffer
                self.hearing.pause(self._stt(), buf.before(turn.ms), buf.rate, buf.received_ms,
                                   responding=self.response is not None)
            else:
                await self._speech_stopped(turn.ms)
        buf = self.buffer
        if self.speech_item is None and buf.held_ms > IDLE_KEEP_MS:
            buf.drop_before(buf.received_ms - IDLE_KEEP_MS)     # waiting: the last moments
            self.info.buffered_ms = buf.held_ms

    async def _speech_started(self, ms: int) -> None:
        vad = self.settings.vad
        if ms > self.buffer.start_ms:
            self.buffer.drop_before(ms)     # the prefix padding stays
        self.speech_item = new_id("item")
        self.hearing.begin(self.speech_item, self.buffer.received_ms)
        await self.send(event("input_audio_buffer.speech_started", audio_start_ms=ms,
                              item_id=self.speech_item))
        if self.response is not None and vad is not None and vad.interrupt_response:
            await self._cancel_response("turn_detected")

    async def _speech_stopped(self, ms: int) -> None:
        item_id, self.speech_item = self.speech_item or new_id("item"), None
        await self.send(event("input_audio_buffer.speech_stopped", audio_end_ms=ms,
                              item_id=item_id))
        await self._commit(self.buffer.cut(ms), item_id, self.hearing.end())
        self.info.buffered_ms = self.buffer.held_ms
        vad = self.settings.vad
        if vad is not None and vad.create_response and self.response is None:
            await self._start_response(self.settings)

    async def _commit_event(self, ev: dict) -> None:
        held = self.buffer.held_ms
        if held < MIN_COMMIT_MS:
            raise InvalidRequest(f"The input audio buffer holds {held:.0f} ms of audio; at "
                                 f"least {MIN_COMMIT_MS} ms is needed to commit",
                                 code="input_audio_buffer_commit_empty")
        item_id = self.speech_item or new_id("item")
        deltas = self.hearing.end() if self.speech_item else TranscriptDeltas()
        audio = self._reset_buffer()
        await self._commit(audio, item_id, deltas)

    def _reset_buffer(self) -> bytes:
        """Empties the buffer (its audio returned) and ends any speech in it."""
        audio = self.buffer.take()
        self.info.buffered_ms = 0.0
        self.vad = None
        self.speech_item = None
        self.hearing.end()
        return audio

    async def _clear(self, ev: dict) -> None:
        self._reset_buffer()
        await self.send(event("input_audio_buffer.cleared"))

    async def _commit(self, audio: bytes, item_id: str, deltas: TranscriptDeltas) -> None:
        """The buffer's audio becomes a user item; its transcription runs as a task."""
        self.turn_end_at = time.monotonic()
        previous = self.conversation.last_id()
        item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
                "status": "completed", "content": [{"type": "input_audio", "transcript": None}]}
        self.conversation.append(item)
        await self.send(event("input_audio_buffer.committed", item_id=item_id,
                              previous_item_id=previous))
        for frame in item_added(item, previous):
            await self.send(frame)
        self.hearing.commit(item, previous, self._stt(), audio, self.buffer.rate, deltas)

    # ------------------------------------------------------------------ the conversation

    async def _item_create(self, ev: dict) -> None:
        item = parse_item(ev.get("item"))
        heard = await self._item_audio(item)
        previous = self.conversation.insert(item, ev.get("previous_item_id"))
        for frame in item_added(item, previous):
            await self.send(frame)
        if heard is None:
            await self.send(item_done(item, previous))
            return
        index, pcm = heard              # done once heard, as a committed item is
        self.hearing.commit(item, previous, self._stt(), pcm, self.buffer.rate,
                            TranscriptDeltas(), index)

    async def _item_audio(self, item: dict) -> tuple[int, bytes] | None:
        """The user item's audio to hear (content index, 16-bit PCM at the input format's
        rate), decoded and bounded as appended audio is; None: nothing to hear."""
        found = item_audio(item)
        if found is None:
            return None
        index, audio = found
        at = f"item.content[{index}].audio"
        pcm = await decode_event_audio_yielding(audio, self.settings.input_format, at)
        ms = self.buffer.ms(len(pcm))
        if ms < MIN_COMMIT_MS or ms > self.deps.max_buffer_secs * 1000:
            raise InvalidRequest(
                f"'{at}' holds {ms:.0f} ms of audio; from {MIN_COMMIT_MS} ms to "
                f"{self.deps.max_buffer_secs:g} s (limits.realtime_max_buffer_secs) is heard",
                param=at)
        return index, pcm

    async def _item_delete(self, ev: dict) -> None:
        item = self.conversation.delete(ev.get("item_id"))
        await self.send(event("conversation.item.deleted", item_id=item["id"]))

    async def _item_retrieve(self, ev: dict) -> None:
        item = self.conversation.get(ev.get("item_id"))
        await self.send(event("conversation.item.retrieved", item=item))

    async def _item_truncate(self, ev: dict) -> None:
        item, end = self.conversation.truncate(ev.get("item_id"), ev.get("audio_end_ms"))
        await self.send(event("conversation.item.truncated", item_id=item["id"],
                              content_index=0, audio_end_ms=end))

    # ------------------------------------------------------------------ responses

    async def _response_create(self, ev: dict) -> None:
        if self.response is not None:
            raise InvalidRequest("The conversation has an active response; cancel it or "
                                 "wait for response.done",
                                 code="conversation_already_has_active_response")
        body = ev.get("response") or {}
        if not isinstance(body, dict):
            raise InvalidRequest("'response' must be an object", param="response")
        await self._start_response(apply_settings(self.settings, body, "response"))

    async def _start_response(self, settings: Settings) -> None:
        response = Response(self.deps.caller(), self.deps.voices, settings, [], self.send,
                            new_id("resp"),
                            rate_limits=lambda: self.deps.rate_limits(self._unbilled()))
        task = asyncio.ensure_future(self._respond(response))
        self.response = (task, response)
        self.info.responding = True

    async def _respond(self, response: Response) -> None:
        async def heard() -> None:              # the user's words first
            await self.hearing.wait()
            response.items = list(self.conversation.items)

        try:
            started, self.turn_end_at = self.turn_end_at or time.monotonic(), None
            codec = await response.run(heard)
            self.deps.timed("realtime_turn", started, time.monotonic())
            if response.first_audio is not None:
                self.deps.timed("realtime_first_audio", started, response.first_audio)
            self.info.responses += 1
            if codec.end is not None:
                self.info.tokens_in += codec.end.first.prompt_tokens
                self.info.tokens_out += sum(r.completion_tokens for r in codec.end.results)
            for item in codec.output:
                spoken = codec.spoken if item is codec.message and codec.audio else None
                self.conversation.append(item, spoken)
            await self.send(rate_limits_event(self.deps.rate_limits(self._unbilled())))
        except GONE:
            pass
        except Exception:  # noqa: BLE001 - a response's bug must not end the session
            log.exception("a realtime response failed")
        finally:
            if self.response is not None and self.response[1] is response:
                self.response = None
                self.info.responding = False

    async def _cancel_response(self, reason: str) -> None:
        task, response = self.response or (None, None)
        if task is None or response is None:
            raise InvalidRequest("There is no response to cancel",
                                 code="response_cancel_not_active")
        response.reason = reason
        if not response.finishing:          # response.done is on its way already
            task.cancel()
        await asyncio.wait({task})

    async def _response_cancel(self, ev: dict) -> None:
        await self._cancel_response("client_cancelled")


HANDLERS = {
    "session.update": RealtimeSession._session_update,
    "input_audio_buffer.append": RealtimeSession._append,
    "input_audio_buffer.commit": RealtimeSession._commit_event,
    "input_audio_buffer.clear": RealtimeSession._clear,
    "conversation.item.create": RealtimeSession._item_create,
    "conversation.item.delete": RealtimeSession._item_delete,
    "conversation.item.retrieve": RealtimeSession._item_retrieve,
    "conversation.item.truncate": RealtimeSession._item_truncate,
    "response.create": RealtimeSession._response_create,
    "response.cancel": RealtimeSession._response_cancel,
}

