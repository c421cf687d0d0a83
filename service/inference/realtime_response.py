"""One Realtime response, pipelined: the chat turn (`inference.turn.chat_turn`, the same turn
every dialect runs, rendered by `wire.realtime_out.ResponseCodec`) writes the answer; each
sentence the codec completes goes to a speaker task that holds the text_to_speech lease and
speaks it while the model writes the next one. The response's events go out through
``send`` in the order the protocol gives them; the last is ``response.done``.

Cancelling the response's task (``response.cancel``, or the user's speech: barge-in) stops
both engines at their next token or phrase, and the task still ends with ``response.done``
of status ``cancelled``: no audio is sent after it, and the message keeps as its transcript
the sentences whose audio was sent.

Where both models compute on the same CPU cores (neither may use the GPU here), the chat
model is paused while a sentence is spoken (``ChatRequest.pause``) rather than run beside it:
two engines that each want every core slow each other far past the sum of their times (on 2
cores, a three-sentence answer's first audio came 1.8x later than the same turn done as three
sequential calls). Paused, the first sentence is spoken as soon as it is written, and each
next one is written while the client plays the one before.

Threading: the event loop; engine calls in worker threads (`LeasedCall.run`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from hypnos.engines.records import SpeechRequest
from hypnos.service.errors import HypnosError
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.capabilities import SPEECH
from hypnos.service.inference.chat_checks import chat_lease
from hypnos.service.inference.leased import LeasedCall, leased
from hypnos.service.inference.turn import chat_turn
from hypnos.service.media.realtime_audio import to_wire
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.realtime_in import Settings, chat_body
from hypnos.service.wire.realtime_out import (ResponseCodec, error_event, event,
                                              rate_limits_event, response_object)

log = logging.getLogger(__name__)
Send = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Voices:
    """The models a response uses: the chat model and the pool's text_to_speech one."""
    chat: str
    speech: str | None


def share_cores(caller: Caller, chat: str, speech: str | None) -> bool:
    """Whether the chat and the speech model compute on the same CPU cores: both engines'
    kinds are ones the scheduler may not place on the GPU here (``Scheduler.accelerated``).
    A model it cannot find shares nothing (its lease will say why)."""
    if speech is None:
        return False
    try:
        kinds = [caller.sched.get(m, enabled_only=False).cfg.engine for m in (chat, speech)]
    except HypnosError:
        return False
    return not any(k in caller.sched.accelerated for k in kinds)


class EventSink:
    """`inference.turn.FrameSink` over the session's ``send``: frames are events already."""

    def __init__(self, send: Send):
        self._send = send

    async def open(self, media_type: str, headers: dict[str, str]) -> None:
        return None

    async def send(self, frame: str) -> None:
        await self._send(frame)

    async def close(self) -> None:
        return None

    async def whole(self, body: dict, headers: dict[str, str]) -> None:
        raise NotImplementedError("a realtime response is always streamed")


class Response:
    """``run()`` makes the response; cancel its task to stop it (``reason`` says why)."""

    def __init__(self, caller: Caller, voices: Voices, settings: Settings, items: list[dict],
                 send: Send, rid: str,
                 rate_limits: Callable[[], list[dict]] = lambda: []):
        """``items``: the conversation the answer follows (it may change until ``run``'s
        ``before`` returns); ``rate_limits``: the key's limits, sent after
        ``response.created``."""
        self.caller, self.voices, self.settings, self.items = caller, voices, settings, items
        self.send, self.rid, self.rate_limits = send, rid, rate_limits
        self.audio = "audio" in settings.modalities and voices.speech is not None
        self.sentences: asyncio.Queue[str | None] = asyncio.Queue()
        self.codec = ResponseCodec(rid, audio=self.audio, voice=settings.voice,
                                   speak=self.sentences.put_nowait,
                                   fmt=settings.output_format,
                                   max_tokens=settings.max_output_tokens)
        self.reason = "client_cancelled"        # set before a cancel
        self.finishing = False                  # the closing events are going out
        self.first_audio: float | None = None   # time.monotonic() of the first audio sent
        # Set while a sentence is spoken, when the two models share the CPU cores.
        self.pause = threading.Event() if self.audio and share_cores(
            caller, voices.chat, voices.speech) else None

    async def run(self, before: Callable[[], Awaitable[None]] | None = None) -> ResponseCodec:
        """Returns the codec (its items and spoken sentences) once response.done is out.
        ``before``: awaited after ``response.created`` and before the answer is written (the
        user's words being heard); ``items`` may change until it returns. A cancel at any
        point, that wait included, still ends in ``response.done``."""
        codec = self.codec
        created = False
        try:
            await self.send(self._created())
            created = True
            await self.send(rate_limits_event(self.rate_limits()))
            if before is not None:
                await before()
            await self._produce()
            status, reason = codec.status()
        except asyncio.CancelledError:
            status, reason = "cancelled", self.reason
        except HypnosError as exc:
            codec.error = exc
            status, reason = "failed", None
            await self.send(error_event(exc.message, kind=exc.type, code=exc.code,
                                        param=exc.param))
        self.finishing = True
        if not created:                     # cancelled before it went out
            await self.send(self._created())
        for frame in codec.finish(status, reason):
            await self.send(frame)
        return codec

    def _created(self) -> str:
        codec = self.codec
        return event("response.created", response=response_object(
            self.rid, "in_progress", modalities=codec.modalities, voice=self.settings.voice,
            fmt=codec.fmt, max_tokens=codec.max_tokens))

    async def _produce(self) -> None:
        self.codec.previous = self.items[-1]["id"] if self.items else None
        params = parse_chat(chat_body(self.voices.chat, self.settings, self.items),
                            self.caller.limits)
        speaker = asyncio.ensure_future(self._speak()) if self.audio else None
        request = dataclasses.replace(params.request, pause=self.pause)
        try:
            await chat_turn(self.caller, chat_lease(self.caller, params), request,
                            self.codec, EventSink(self.send), stream=True)
            self.sentences.put_nowait(None)
            if speaker is not None:
                await speaker
        except BaseException:
            if speaker is not None:
                speaker.cancel()
                await asyncio.wait({speaker})
            raise
        if self.codec.error is not None and self.codec.end is None:
            raise self.codec.error              # refused once the stream had started

    async def _speak(self) -> None:
        """Speak each sentence as it comes, under one text_to_speech lease taken at the
        first sentence; None ends."""
        first = await self.sentences.get()
        if first is None:
            return
        assert self.voices.speech is not None
        async with leased(self.caller, self.voices.speech, SPEECH, param="voice") as call:
            text: str | None = first
            while text is not None:
                await self._say(call, text)
                text = await self.sentences.get()

    async def _say(self, call: LeasedCall, text: str) -> None:
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        req = SpeechRequest(text=text, voice=self.settings.voice)
        task = asyncio.ensure_future(call.run(
            call.speaker.synthesize, req,
            lambda chunk: loop.call_soon_threadsafe(chunks.put_nowait, chunk)))
        task.add_done_callback(lambda _t: chunks.put_nowait(None))
        rate = call.speaker.sample_rate
        started = False
        try:
            if self.pause is not None:
                self.pause.set()            # the chat model's next step waits for this one
            while (chunk := await chunks.get()) is not None:
                data = to_wire(chunk, rate, self.codec.fmt)     # a phrase at a time
                if not data:
                    continue
                if not started:
                    started = True
                    self.first_audio = self.first_audio or time.monotonic()
                    for frame in self.codec.sentence(text):
                        await self.send(frame)
                await self.send(self.codec.audio_delta(data))
            task.result()
        except BaseException:
            call.cancel.set()
            await asyncio.wait({task})
            raise
        finally:
            if self.pause is not None:
                self.pause.clear()
