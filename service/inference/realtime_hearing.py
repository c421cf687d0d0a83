"""A realtime session's ears: the transcription of each committed user item (the same leased
call /v1/audio/transcriptions makes), and partial transcriptions of the speech in progress.

Partials (server VAD only): while the user speaks, the speech so far is transcribed again
after each ``PARTIAL_EVERY_MS`` of new audio, and the words two partials in a row agree on
go out as ``conversation.item.input_audio_transcription.delta`` events for the item the
VAD's ``speech_started`` named (`wire.transcript_deltas` says what is sent, and how the
final ``...completed`` transcript, always whole, relates to the deltas). They are for speech
heard as it is spoken: audio sent more than twice as fast as it plays (a recording uploaded
at once) gets none, as at least half of ``PARTIAL_EVERY_MS`` must also pass on the clock;
its final transcription comes soon anyway, and is not kept waiting behind a partial. They
are kept cheap: one at a time per session, none while the speech_to_text model is leased by
anyone (another session, a request, this session's own final transcriptions) or while this
session's response is being made, none once the speech is longer than ``PARTIAL_MAX_MS``
(each partial reads all the speech so far). A partial still running when the speech is committed
finishes (an engine call stops only between segments) and is dropped; the final
transcription waits for the model behind it.

Pauses: once the VAD hears ``realtime.PAUSE_MS`` of quiet, a partial of exactly the audio a
stop there would commit starts (``pause``; the same rules, but no wait for the clock or for
``PARTIAL_EVERY_MS``), so by the time the stop comes (``silence_duration_ms`` of quiet) the
words are partly or wholly heard. A commit whose audio is byte for byte the audio of the
partial made last takes that partial's text as its final transcription instead of asking
again; when the speech resumed, the audio differs and the commit transcribes its own. A
periodic partial is not started once the speech has been quiet for ``PAUSING_MS``, so that
the model is free when the pause comes.

Threading: the event loop; the engine calls in worker threads.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from sanic.exceptions import WebsocketClosed
from websockets.exceptions import ConnectionClosed

from hypnos.engines.records import TranscribeRequest
from hypnos.service.errors import HypnosError, InvalidRequest
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.capabilities import TRANSCRIPTION, require
from hypnos.service.inference.transcription import transcribe
from hypnos.service.media.audio_frames import wav_bytes
from hypnos.service.media.realtime_audio import InputBuffer
from hypnos.service.media.resample import pcm16_to_float
from hypnos.service.refusals import Refused
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.wire.realtime_out import event, item_done
from hypnos.service.wire.transcript_deltas import TranscriptDeltas, spaced

log = logging.getLogger("hypnos.realtime")
Send = Callable[[str], Awaitable[None]]
PARTIAL_EVERY_MS = 1000
# No periodic partial once the speaker has been quiet this long: the pause's transcription is
# due (``pause``), and a partial of nearly the same audio would hold the model.
PAUSING_MS = 100
PARTIAL_MAX_MS = 15000
STT_PARAM = "session.audio.input.transcription"
GONE = (ConnectionClosed, WebsocketClosed)


def partial_due(new_ms: float, new_secs: float, speech_ms: float) -> bool:
    """Whether a partial is due after ``new_ms`` of audio and ``new_secs`` on the clock since
    the last one (or the speech's start), the speech being ``speech_ms`` long. Pure."""
    return new_ms >= PARTIAL_EVERY_MS and new_secs * 1000 >= PARTIAL_EVERY_MS / 2 and \
        speech_ms <= PARTIAL_MAX_MS


def transcriber_idle(sched: Scheduler, model: str) -> bool:
    """Whether ``model`` is in the pool with no lease, queued or running."""
    try:
        return sched.get(model).leases == 0
    except Refused:
        return False


def check_transcriber(sched: Scheduler, model: str, body: dict) -> None:
    """Refuses, naming the field ``body`` (a session.update's session) set it by, a
    transcription model the pool cannot hear with (OpenAI's "whisper-1" in a pool without
    that name or alias): every turn would fail with it."""
    at = ("session.input_audio_transcription.model" if "input_audio_transcription" in body
          else f"{STT_PARAM}.model")
    try:
        require(sched, model, TRANSCRIPTION, param=at)
    except HypnosError as exc:
        raise InvalidRequest(
            f"{exc.message.rstrip('.')}. Name a speech_to_text model of the pool (or give "
            f"one the alias '{model}'), or leave the model out to use the pool's own",
            param=at, code="model_not_found" if exc.status == 404 else exc.code) from None


class Hearing:
    """``listen`` as audio comes during speech, ``commit`` once it is a user item; ``stop``
    when the session ends. Every method returns at once; the transcriptions run as tasks."""

    def __init__(self, caller: Callable[[], Caller], send: Send,
                 clock: Callable[[], float] = time.monotonic):
        self.caller, self.send, self.clock = caller, send, clock
        self.finals: set[asyncio.Task] = set()      # final transcriptions in flight
        self.partial: asyncio.Task | None = None   # its result: the text, None if it failed
        self.partial_of: tuple | None = None        # the (item, model, audio) it transcribes
        self.item: str | None = None                # the speech being heard (partials)
        self.deltas = TranscriptDeltas()
        self.partial_at = (0.0, 0.0)                # (session ms, clock) of the last partial

    def begin(self, item_id: str, now_ms: float) -> None:
        """Speech started (the VAD's ``item_id``) at ``now_ms`` on the session's clock."""
        self.item, self.deltas = item_id, TranscriptDeltas()
        self.partial_at = (now_ms, self.clock())

    def end(self) -> TranscriptDeltas:
        """The speech ended (committed or cleared): no more partials for it; what its
        deltas said, for the final transcription."""
        deltas, self.item, self.deltas = self.deltas, None, TranscriptDeltas()
        return deltas

    def listen(self, model: str | None, speech: InputBuffer, responding: bool,
               quiet_ms: int = 0) -> None:
        """``speech`` holds all the speech so far, the last ``quiet_ms`` of it quiet: start a
        partial transcription of it when one is due and the rules above allow."""
        if model is None or quiet_ms >= PAUSING_MS or not self._may_start(responding):
            return
        now, wall = speech.received_ms, self.clock()
        if not partial_due(now - self.partial_at[0], wall - self.partial_at[1], speech.held_ms):
            return
        if not transcriber_idle(self.caller().sched, model):
            return
        self._start_partial(model, bytes(speech.data), speech.rate, now, wall)

    def pause(self, model: str | None, speech: bytes, rate: int, now_ms: float,
              responding: bool) -> None:
        """The VAD heard a pause (``now_ms`` of audio received): ``speech`` is what a stop
        there would commit. Transcribe it now, unless a transcription is running or the
        speech is too long (rules above)."""
        if model is None or not self._may_start(responding):
            return
        if len(speech) / 2 / rate * 1000 > PARTIAL_MAX_MS or \
                not transcriber_idle(self.caller().sched, model):
            return
        self._start_partial(model, speech, rate, now_ms, self.clock())

    def _may_start(self, responding: bool) -> bool:
        """Whether speech is being heard and nothing else of this session transcribes."""
        return not (self.item is None or responding or self.finals or
                    (self.partial is not None and not self.partial.done()))

    def _start_partial(self, model: str, speech: bytes, rate: int, now_ms: float,
                       wall: float) -> None:
        assert self.item is not None
        self.partial_at = (now_ms, wall)
        self.partial_of = (self.item, model, speech)
        self.partial = asyncio.ensure_future(self._partial(self.item, model, speech, rate))

    async def _partial(self, item_id: str, model: str, speech: bytes, rate: int) -> str | None:
        """The text of ``speech`` (None when it could not be had), sent as a delta while the
        item is still being spoken."""
        try:
            text = await self._text(model, speech, rate)
            if self.item == item_id and (delta := self.deltas.partial(text)):
                await self.send(event("conversation.item.input_audio_transcription.delta",
                                      item_id=item_id, content_index=0, delta=delta))
            return text
        except HypnosError as exc:          # the final transcription reports failures
            log.debug("a partial transcription failed: %s", exc.message)
        except GONE:
            pass
        except Exception:  # noqa: BLE001 - a partial's bug must not end the session
            log.exception("a realtime partial transcription failed")
        return None

    async def _text(self, model: str, audio: bytes, rate: int) -> str:
        done = await transcribe(self.caller().sched, model, TranscribeRequest(
            audio=wav_bytes(pcm16_to_float(audio), rate), timestamps=False),
            audio_param="audio")
        return spaced(done.result.text)

    def commit(self, item: dict, previous: str | None, model: str | None, audio: bytes,
               rate: int, deltas: TranscriptDeltas, index: int = 0) -> None:
        """Transcribe the user ``item``'s ``audio`` (``deltas``: what its partials sent), or
        take the text of the last partial when it transcribed this very audio; the
        transcript goes to the item's content part ``index``."""
        heard = self.partial if self.partial_of == (item["id"], model, audio) else None
        task = asyncio.ensure_future(self._final(item, previous, model, audio, rate, deltas,
                                                 heard, index))
        self.finals.add(task)
        task.add_done_callback(self.finals.discard)

    async def _final(self, item: dict, previous: str | None, model: str | None, audio: bytes,
                     rate: int, deltas: TranscriptDeltas,
                     heard: asyncio.Task | None = None, index: int = 0) -> None:
        part = item["content"][index]
        text = ""
        try:
            if model is None:
                raise InvalidRequest("The pool has no speech_to_text model to hear audio with",
                                     param=STT_PARAM)
            said = await heard if heard is not None else None
            text = said if said is not None else await self._text(model, audio, rate)
            if delta := deltas.final(text):
                await self.send(event("conversation.item.input_audio_transcription.delta",
                                      item_id=item["id"], content_index=index, delta=delta))
            await self.send(event(
                "conversation.item.input_audio_transcription.completed", item_id=item["id"],
                content_index=index, transcript=text,
                usage={"type": "duration", "seconds": round(len(audio) / 2 / rate, 3)}))
        except HypnosError as exc:
            await self.send(event("conversation.item.input_audio_transcription.failed",
                                  item_id=item["id"], content_index=index,
                                  error={"type": exc.type, "code": exc.code,
                                         "message": exc.message}))
        part["transcript"] = text
        await self.send(item_done(item, previous))

    async def wait(self) -> None:
        """Until the final transcriptions in flight are done."""
        if self.finals:
            await asyncio.wait(set(self.finals))

    async def stop(self) -> None:
        """Cancel every transcription; returns once they ended."""
        tasks = set(self.finals) | ({self.partial} if self.partial is not None else set())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)
