"""The server side of the Realtime protocol: every event the session sends is built here, and
`ResponseCodec` is the dialect's `wire.codec.ChatCodec`: it turns one chat turn's typed deltas
into the response's events (``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta`` or, when the answer is spoken, complete sentences handed to
``speak``; function calls as ``response.function_call_arguments.delta|done``), and closes the
response with `finish` once the speech is out (``...done`` events, then ``response.done``
with usage). Event names are the GA protocol's; each event matches the openai SDK's server
event types. An item entering the conversation is announced by `item_added` (the beta's
``conversation.item.created``, which the SDK's server events still define, then the GA's
``conversation.item.added``) and closed by ``conversation.item.done``. Pure but for the
codec's own state; ``speak`` must not block.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Callable

from hypnos.engines.records import ChatDelta, ToolCall
from hypnos.service.errors import HypnosError
from hypnos.service.wire.sentences import SentenceSplitter
from hypnos.service.wire.codec import TurnEnd
from hypnos.service.wire.realtime_in import PCM, bytes_per_ms, format_wire, new_id


def event(kind: str, **fields: object) -> str:
    """One server event as its frame text, with a fresh ``event_id``."""
    return json.dumps({"type": kind, "event_id": new_id("event"), **fields},
                      ensure_ascii=False)


def error_event(message: str, *, kind: str = "invalid_request_error", code: str | None = None,
                param: str | None = None, event_id: str | None = None) -> str:
    """OpenAI's ``error`` event; ``event_id`` is the client event it answers."""
    err: dict = {"type": kind, "message": message, "code": code, "param": param,
                 "event_id": event_id}
    return event("error", error={k: v for k, v in err.items() if v is not None or k == "code"})


def item_added(item: dict, previous: str | None) -> list[str]:
    """An item entered the conversation after ``previous`` (an item id, None: first)."""
    return [event("conversation.item.created", item=item, previous_item_id=previous),
            event("conversation.item.added", item=item, previous_item_id=previous)]


def item_done(item: dict, previous: str | None) -> str:
    return event("conversation.item.done", item=item, previous_item_id=previous)


def rate_limits_event(limits: list[dict]) -> str:
    """``rate_limits.updated``: each limit as {name: requests | tokens, limit, remaining,
    reset_seconds}; an empty list when none applies."""
    return event("rate_limits.updated", rate_limits=limits)


def response_object(rid: str, status: str, *, modalities: tuple[str, ...], voice: str,
                    output: list[dict] | None = None, usage: dict | None = None,
                    details: dict | None = None, fmt: str = PCM,
                    max_tokens: int | None = None) -> dict:
    """``max_tokens``: the response's cap on output tokens (None: "inf", none)."""
    out: dict = {"id": rid, "object": "realtime.response", "status": status,
                 "status_details": details, "output": output or [],
                 "conversation_id": None, "output_modalities": list(modalities),
                 "audio": {"output": {"format": format_wire(fmt), "voice": voice}},
                 "max_output_tokens": "inf" if max_tokens is None else max_tokens}
    if usage is not None:
        out["usage"] = usage
    return out


def usage_of(end: TurnEnd | None) -> dict:
    r = end.first if end is not None else None
    prompt, completion = (r.prompt_tokens, r.completion_tokens) if r else (0, 0)
    cached = r.cached_tokens if r else 0
    return {"total_tokens": prompt + completion, "input_tokens": prompt,
            "output_tokens": completion,
            "input_token_details": {"text_tokens": prompt, "audio_tokens": 0,
                                    "cached_tokens": cached},
            "output_token_details": {"text_tokens": completion, "audio_tokens": 0}}


class ResponseCodec:
    """One response's events. Called from the response's task only: the turn drives
    ``head``/``delta``/``tail``/``refused``; the speaker drives ``sentence``/``audio``; the
    session ends it with ``finish``."""
    media_type = "application/json"
    stream_headers: dict[str, str] = {}
    keepalive: str | None = None

    def __init__(self, rid: str, *, audio: bool, voice: str,
                 speak: Callable[[str], None] = lambda _s: None, fmt: str = PCM,
                 previous: str | None = None, max_tokens: int | None = None):
        """``fmt``: the audio deltas' format; ``previous``: the conversation's last item
        when the response starts (its first item follows it); ``max_tokens``: its cap on
        output tokens (None: none)."""
        self.rid, self.audio, self.voice, self.speak = rid, audio, voice, speak
        self.fmt, self.previous, self.max_tokens = fmt, previous, max_tokens
        self.splitter = SentenceSplitter()
        self.output: list[dict] = []        # the response's items, in order
        self.message: dict | None = None    # the assistant message, once it has text
        self.text = ""                      # all the text the model wrote
        self.spoken: list[tuple[float, str]] = []   # (audio ms where it starts, sentence)
        self.audio_ms = 0.0                 # audio sent so far
        self.end: TurnEnd | None = None
        self.error: HypnosError | None = None

    @property
    def modalities(self) -> tuple[str, ...]:
        return ("audio",) if self.audio else ("text",)

    def _where(self, item: dict) -> dict:
        return {"response_id": self.rid, "item_id": item["id"],
                "output_index": self.output.index(item)}

    def _before(self, item: dict) -> str | None:
        """The id of the item before ``item`` in the conversation."""
        at = self.output.index(item)
        return self.output[at - 1]["id"] if at else self.previous

    # ------------------------------------------------------------------ ChatCodec

    def head(self, seeds: tuple[int, ...]) -> list[str]:
        return []

    def delta(self, index: int, d: ChatDelta) -> list[str]:
        frames: list[str] = []
        if d.content:
            frames += self._open_message()
            self.text += d.content
            if self.audio:
                for sentence in self.splitter.push(d.content):
                    self.speak(sentence)
            else:
                frames.append(event("response.output_text.delta", **self._where(self.message),
                                    content_index=0, delta=d.content))
        if d.tool_call is not None:
            frames += self._call(d.tool_call)
        return frames

    def tail(self, end: TurnEnd) -> list[str]:
        self.end = end
        if self.audio and (rest := self.splitter.flush()):
            self.speak(rest)
        return []

    def refused(self, error: HypnosError) -> list[str]:
        self.error = error
        return []

    def whole(self, end: TurnEnd) -> dict:
        raise NotImplementedError("a realtime response is always streamed")

    # ------------------------------------------------------------------ items

    def _open_message(self) -> list[str]:
        if self.message is not None:
            return []
        kind = "output_audio" if self.audio else "output_text"
        self.message = {"id": new_id("item"), "object": "realtime.item", "type": "message",
                        "role": "assistant", "status": "in_progress", "content": []}
        self.output.append(self.message)
        part = {"type": "audio", "transcript": ""} if self.audio else {"type": "text",
                                                                       "text": ""}
        added = dict(self.message, content=[])
        self.message["content"] = [{"type": kind, **({"transcript": ""} if self.audio
                                                      else {"text": ""})}]
        return [event("response.output_item.added", response_id=self.rid,
                      output_index=self.output.index(self.message), item=added),
                *item_added(added, self._before(self.message)),
                event("response.content_part.added", **self._where(self.message),
                      content_index=0, part=part)]

    def _call(self, call: ToolCall) -> list[str]:
        item = {"id": new_id("item"), "object": "realtime.item", "type": "function_call",
                "status": "in_progress", "name": call.name, "call_id": new_id("call"),
                "arguments": ""}
        self.output.append(item)
        where = {**self._where(item), "call_id": item["call_id"]}
        frames = [event("response.output_item.added", response_id=self.rid,
                        output_index=where["output_index"], item=dict(item)),
                  *item_added(dict(item), self._before(item)),
                  event("response.function_call_arguments.delta", **where,
                        delta=call.arguments),
                  event("response.function_call_arguments.done", **where, name=call.name,
                        arguments=call.arguments)]
        item.update(arguments=call.arguments, status="completed")
        frames += [event("response.output_item.done", response_id=self.rid,
                         output_index=where["output_index"], item=dict(item)),
                   item_done(dict(item), self._before(item))]
        return frames

    # ------------------------------------------------------------------ speech

    def sentence(self, text: str) -> list[str]:
        """A sentence about to be heard: its transcript delta (before its first audio)."""
        assert self.message is not None, "a sentence before any text"
        delta = text if not self.spoken else " " + text
        self.spoken.append((self.audio_ms, text))
        return [event("response.output_audio_transcript.delta", **self._where(self.message),
                      content_index=0, delta=delta)]

    def audio_delta(self, data: bytes) -> str:
        """Audio (in the response's format) of the sentence last given to ``sentence``."""
        assert self.message is not None, "audio before any text"
        self.audio_ms += len(data) / bytes_per_ms(self.fmt)
        return event("response.output_audio.delta", **self._where(self.message),
                     content_index=0, delta=base64.b64encode(data).decode())

    def transcript(self) -> str:
        """What was heard (sent) so far: the spoken sentences."""
        return " ".join(text for _, text in self.spoken)

    # ------------------------------------------------------------------ the end

    def finish(self, status: str, reason: str | None = None) -> list[str]:
        """The closing events: the message's ``...done`` events, then ``response.done``.
        ``status``: completed | cancelled | incomplete | failed."""
        frames: list[str] = []
        m = self.message
        if m is not None:
            m["status"] = "completed" if status == "completed" else "incomplete"
            where = self._where(m)
            if self.audio:
                said = self.transcript()
                m["content"] = [{"type": "output_audio", "transcript": said}]
                frames += [event("response.output_audio.done", **where, content_index=0),
                           event("response.output_audio_transcript.done", **where,
                                 content_index=0, transcript=said),
                           event("response.content_part.done", **where, content_index=0,
                                 part={"type": "audio", "transcript": said})]
            else:
                m["content"] = [{"type": "output_text", "text": self.text}]
                frames += [event("response.output_text.done", **where, content_index=0,
                                 text=self.text),
                           event("response.content_part.done", **where, content_index=0,
                                 part={"type": "text", "text": self.text})]
            frames += [event("response.output_item.done", response_id=self.rid,
                             output_index=where["output_index"], item=m),
                       item_done(m, self._before(m))]
        details: dict | None = None
        if status != "completed":
            details = {"type": status, "reason": reason}
            if self.error is not None:
                details = {"type": "failed", "error": {"type": self.error.type,
                                                       "code": self.error.code,
                                                       "message": self.error.message}}
        frames.append(event("response.done", response=response_object(
            self.rid, status, modalities=self.modalities, voice=self.voice,
            output=self.output, usage=usage_of(self.end), details=details, fmt=self.fmt,
            max_tokens=self.max_tokens)))
        return frames

    def status(self) -> tuple[str, str | None]:
        """How the turn ended: (status, reason) for `finish`."""
        if self.error is not None:
            return "failed", None
        if self.end is not None and self.end.first.finish_reason == "length":
            return "incomplete", "max_output_tokens"
        return "completed", None
