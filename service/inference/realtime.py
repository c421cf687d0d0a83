"""A Realtime session (GET /v1/realtime, OpenAI's Realtime protocol over a WebSocket): the
client's events are read one at a time, in order; audio is kept in the input buffer, cut
into turns by the server VAD (`media.turn_vad`) or committed by the client, transcribed by
the pool's speech_to_text model (the same leased call /v1/audio/transcriptions makes), and
answered by a `realtime_response.Response` (chat, then speech sentence by sentence).

A bad event is answered with an ``error`` event naming the client's ``event_id``; the socket
stays open. The session ends when the client hangs up, or after ``realtime_idle_timeout_secs``
with no event (an ``error`` event ``idle_timeout``, then a close).

Threading: the event loop. One task reads; the response and each transcription run as their
own tasks; sends are serialised by one lock, so each frame goes out whole.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sanic.exceptions import WebsocketClosed
from websockets.exceptions import ConnectionClosed

from hypnos.engines.records import TranscribeRequest
from hypnos.service.errors import HypnosError, InvalidRequest
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.realtime_book import SessionInfo
from hypnos.service.inference.realtime_response import Response, Voices
from hypnos.service.inference.transcription import transcribe
from hypnos.service.media.audio_frames import wav_bytes
from hypnos.service.media.resample import WIRE_RATE, StreamResampler, pcm16_to_float
from hypnos.service.media.turn_vad import VAD_RATE, WINDOW_MS, SileroStream, TurnDetector
from hypnos.service.wire.realtime_in import (Settings, apply_settings, new_id, parse_event,
                                             parse_item)
from hypnos.service.wire.realtime_out import error_event, event, pcm_ms

log = logging.getLogger("hypnos.realtime")
GONE = (ConnectionClosed, WebsocketClosed)
MIN_COMMIT_MS = 100                 # OpenAI's least committable buffer
IDLE_KEEP_MS = 2000                 # audio kept before speech while the VAD waits


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


class RealtimeSession:
    def __init__(self, ws: Any, deps: SessionDeps, info: SessionInfo):
        self.ws, self.deps, self.info = ws, deps, info
        self.settings = Settings()
        self.items: list[dict] = []
        self.spoken: dict[str, list[tuple[float, str]]] = {}   # assistant item -> sentences
        self.buffer = bytearray()       # uncommitted 24 kHz pcm16
        self.buffer_ms0 = 0.0           # where the buffer starts in the session's audio
        self.received_ms = 0.0          # audio received since the session opened
        self.vad: tuple[SileroStream, StreamResampler, TurnDetector] | None = None
        self.speech_item: str | None = None     # the item the VAD's current speech will be
        self.response: tuple[asyncio.Task, Response] | None = None
        self.transcribing: set[asyncio.Task] = set()
        self.turn_end_at: float | None = None   # the last commit (the user's turn's end)
        self.send_lock = asyncio.Lock()

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        try:
            await self.send(event("session.created", session=self._session()))
            while (frame := await self._recv()) is not None:
                await self._one(frame)
        except GONE:
            pass
        finally:
            await self._stop_all()

    async def _recv(self) -> str | bytes | None:
        try:
            return await asyncio.wait_for(self.ws.recv(), self.deps.idle_secs)
        except TimeoutError:
            await self.send(error_event(f"No event for {self.deps.idle_secs:g} s "
                                        "(limits.realtime_idle_timeout_secs)",
                                        code="idle_timeout"))
            await self.ws.close(1000, "idle_timeout")
            return None

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
        tasks = set(self.transcribing)
        if self.response is not None:
            tasks.add(self.response[0])
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # ------------------------------------------------------------------ session

    async def _session_update(self, ev: dict) -> None:
        body = ev.get("session")
        if not isinstance(body, dict):
            raise InvalidRequest("'session' must be an object", param="session")
        before = self.settings.vad
        self.settings = apply_settings(self.settings, body, "session")
        if self.settings.vad != before:
            self.vad = None                 # rebuilt with the new settings on the next audio
        await self.send(event("session.updated", session=self._session()))

    # ------------------------------------------------------------------ the input buffer

    async def _append(self, ev: dict) -> None:
        audio = ev.get("audio")
        if not isinstance(audio, str):
            raise InvalidRequest("'audio' must be base64 pcm16 (24 kHz mono)", param="audio")
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("'audio' is not valid base64", param="audio") from None
        pcm = pcm[:len(pcm) - len(pcm) % 2]
        if pcm_ms(len(self.buffer) + len(pcm)) > self.deps.max_buffer_secs * 1000:
            raise InvalidRequest(
                f"The input audio buffer would hold more than {self.deps.max_buffer_secs:g} s "
                "(limits.realtime_max_buffer_secs); commit or clear it", param="audio",
                code="input_audio_buffer_full")
        self.buffer += pcm
        start = self.received_ms
        self.received_ms += pcm_ms(len(pcm))
        self.info.buffered_ms = pcm_ms(len(self.buffer))
        if self.settings.vad is not None:
            await self._detect(pcm, start)

    async def _detect(self, pcm: bytes, start_ms: float) -> None:
        vad = self.settings.vad
        assert vad is not None
        if self.vad is None:
            self.vad = (SileroStream(), StreamResampler(WIRE_RATE, VAD_RATE),
                        TurnDetector(vad.threshold, vad.silence_ms, vad.prefix_ms))
            self.vad[2].index = int(start_ms // WINDOW_MS)  # positions on the session's clock
        stream, rs, turns = self.vad
        for turn in turns.push(stream.push(rs.push(pcm16_to_float(pcm)))):
            if turn.kind == "started":
                await self._speech_started(turn.ms)
            else:
                await self._speech_stopped(turn.ms)
        if self.speech_item is None:        # waiting for speech: keep the last moments only
            drop = pcm_ms(len(self.buffer)) - IDLE_KEEP_MS
            if drop > 0:
                self._drop_head(drop)

    def _drop_head(self, ms: float) -> None:
        nbytes = int(ms * WIRE_RATE / 1000) * 2
        del self.buffer[:nbytes]
        self.buffer_ms0 += pcm_ms(nbytes)
        self.info.buffered_ms = pcm_ms(len(self.buffer))

    async def _speech_started(self, ms: int) -> None:
        vad = self.settings.vad
        if ms > self.buffer_ms0:
            self._drop_head(ms - self.buffer_ms0)     # the prefix padding stays
        self.speech_item = new_id("item")
        await self.send(event("input_audio_buffer.speech_started", audio_start_ms=ms,
                              item_id=self.speech_item))
        if self.response is not None and vad is not None and vad.interrupt_response:
            await self._cancel_response("turn_detected")

    async def _speech_stopped(self, ms: int) -> None:
        item_id, self.speech_item = self.speech_item or new_id("item"), None
        await self.send(event("input_audio_buffer.speech_stopped", audio_end_ms=ms,
                              item_id=item_id))
        cut = int((ms - self.buffer_ms0) * WIRE_RATE / 1000) * 2
        audio, rest = bytes(self.buffer[:max(0, cut)]), self.buffer[max(0, cut):]
        await self._commit(audio, item_id)
        self.buffer, self.buffer_ms0 = bytearray(rest), float(ms)
        vad = self.settings.vad
        if vad is not None and vad.create_response and self.response is None:
            await self._start_response(self.settings)

    async def _commit_event(self, ev: dict) -> None:
        if pcm_ms(len(self.buffer)) < MIN_COMMIT_MS:
            raise InvalidRequest(f"The input audio buffer holds {pcm_ms(len(self.buffer)):.0f} "
                                 f"ms of audio; at least {MIN_COMMIT_MS} ms is needed to "
                                 "commit", code="input_audio_buffer_commit_empty")
        audio = bytes(self.buffer)
        self._reset_buffer()
        await self._commit(audio, self.speech_item or new_id("item"))
        self.speech_item = None

    def _reset_buffer(self) -> None:
        self.buffer = bytearray()
        self.buffer_ms0 = self.received_ms
        self.info.buffered_ms = 0.0
        self.vad = None

    async def _clear(self, ev: dict) -> None:
        self._reset_buffer()
        self.speech_item = None
        await self.send(event("input_audio_buffer.cleared"))

    async def _commit(self, audio: bytes, item_id: str) -> None:
        """The buffer's audio becomes a user item; its transcription runs as a task."""
        self.turn_end_at = time.monotonic()
        previous = self.items[-1]["id"] if self.items else None
        item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "user",
                "status": "completed", "content": [{"type": "input_audio", "transcript": None}]}
        self.items.append(item)
        await self.send(event("input_audio_buffer.committed", item_id=item_id,
                              previous_item_id=previous))
        await self.send(event("conversation.item.added", item=item, previous_item_id=previous))
        task = asyncio.ensure_future(self._transcribe(item, audio))
        self.transcribing.add(task)
        task.add_done_callback(self.transcribing.discard)

    async def _transcribe(self, item: dict, audio: bytes) -> None:
        part = item["content"][0]
        model = self.settings.transcription or self.deps.transcriber
        samples = pcm16_to_float(audio)
        text = ""
        try:
            if model is None:
                raise InvalidRequest("The pool has no speech_to_text model to hear audio with",
                                     param="session.audio.input.transcription")
            done = await transcribe(self.deps.caller().sched, model,
                                    TranscribeRequest(audio=wav_bytes(samples, WIRE_RATE)),
                                    audio_param="audio")
            text = done.result.text.strip()
            await self.send(event("conversation.item.input_audio_transcription.delta",
                                  item_id=item["id"], content_index=0, delta=text))
            await self.send(event(
                "conversation.item.input_audio_transcription.completed", item_id=item["id"],
                content_index=0, transcript=text,
                usage={"type": "duration", "seconds": round(len(samples) / WIRE_RATE, 3)}))
        except HypnosError as exc:
            await self.send(event("conversation.item.input_audio_transcription.failed",
                                  item_id=item["id"], content_index=0,
                                  error={"type": exc.type, "code": exc.code,
                                         "message": exc.message}))
        part["transcript"] = text
        await self.send(event("conversation.item.done", item=item))

    # ------------------------------------------------------------------ the conversation

    def _index(self, item_id: object) -> int:
        for i, item in enumerate(self.items):
            if item["id"] == item_id:
                return i
        raise InvalidRequest(f"No item with id '{item_id}' in the conversation",
                             param="item_id", code="item_not_found")

    async def _item_create(self, ev: dict) -> None:
        item = parse_item(ev.get("item"))
        if any(i["id"] == item["id"] for i in self.items):
            raise InvalidRequest(f"An item with id '{item['id']}' exists already",
                                 param="item.id", code="item_exists")
        prev = ev.get("previous_item_id")
        at = len(self.items) if prev in (None, "") else (
            0 if prev == "root" else self._index(prev) + 1)
        self.items.insert(at, item)
        previous = self.items[at - 1]["id"] if at else None
        await self.send(event("conversation.item.added", item=item, previous_item_id=previous))
        await self.send(event("conversation.item.done", item=item, previous_item_id=previous))

    async def _item_delete(self, ev: dict) -> None:
        item = self.items.pop(self._index(ev.get("item_id")))
        self.spoken.pop(item["id"], None)
        await self.send(event("conversation.item.deleted", item_id=item["id"]))

    async def _item_retrieve(self, ev: dict) -> None:
        item = self.items[self._index(ev.get("item_id"))]
        await self.send(event("conversation.item.retrieved", item=item))

    async def _item_truncate(self, ev: dict) -> None:
        item = self.items[self._index(ev.get("item_id"))]
        end = ev.get("audio_end_ms")
        if isinstance(end, bool) or not isinstance(end, int) or end < 0:
            raise InvalidRequest("'audio_end_ms' must be a non-negative integer",
                                 param="audio_end_ms")
        sentences = self.spoken.get(item["id"])
        if item.get("role") != "assistant" or sentences is None:
            raise InvalidRequest("Only an assistant message with audio can be truncated",
                                 param="item_id")
        kept = [text for start, text in sentences if start < end]
        self.spoken[item["id"]] = [(s, t) for s, t in sentences if s < end]
        item["content"] = [{"type": "output_audio", "transcript": " ".join(kept)}]
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
                            new_id("resp"))
        task = asyncio.ensure_future(self._respond(response))
        self.response = (task, response)
        self.info.responding = True

    async def _respond(self, response: Response) -> None:
        try:
            if self.transcribing:               # the user's words first
                await asyncio.wait(set(self.transcribing))
            response.items = list(self.items)
            started, self.turn_end_at = self.turn_end_at or time.monotonic(), None
            codec = await response.run()
            self.deps.timed("realtime_turn", started, time.monotonic())
            if response.first_audio is not None:
                self.deps.timed("realtime_first_audio", started, response.first_audio)
            self.info.responses += 1
            if codec.end is not None:
                self.info.tokens_in += codec.end.first.prompt_tokens
                self.info.tokens_out += sum(r.completion_tokens for r in codec.end.results)
            self.items += codec.output
            if codec.message is not None and codec.audio:
                self.spoken[codec.message["id"]] = list(codec.spoken)
            await self.send(event("rate_limits.updated", rate_limits=[]))
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
