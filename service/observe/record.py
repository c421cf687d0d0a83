"""What one HTTP request leaves behind for the readers that run once its response is
complete: the key's usage (`http.layers.after_handler`), the metrics and the request log.

The HTTP layer's request middleware opens one `RequestRecord` per request (`open_record`);
the layers, the leased calls and the routes write its typed fields while the request runs,
and the readers read them after the last byte went out. The record is a ``slots`` dataclass:
a misspelt field is an AttributeError where it is written, never a silent 0 where it is
read.

Threading: written and read on the event loop only.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hypnos.engines.records import ChatResult, EmbedResult, TranscribeResult
from hypnos.service.scheduling.lease import Lease

if TYPE_CHECKING:
    from hypnos.service.keys import ApiKey, Permit

# The record of the request the running task serves: set by `open_record`, read by the
# inference layer to add each lease it takes (`leased_by`) without every caller down to the
# lease passing the record along. None outside a request (staging, a background load).
_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "hypnos_request_record", default=None)


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    started: float                      # time.monotonic() when the request middleware ran
    # The leases the request took, in order, each added once admitted (before any load):
    # the last one names the request's model and its tier switch.
    leases: list[Lease] = field(default_factory=list)
    api_key: ApiKey | None = None       # the matched key (None when keys are off)
    permit: Permit | None = None        # the key's admission, released after the last byte
    workflow: tuple[str, str] | None = None   # x-hypnos-workflow, parsed
    status: int = 500                   # the response's status (set as it goes out)
    response_body: bytes | None = None  # a whole JSON answer's body; None for a stream
    # What the engine call counted (None: the family counts no such thing).
    tokens_in: int | None = None        # prompt tokens (chat, embeddings)
    tokens_out: int | None = None       # completion tokens, every choice's together
    cached_tokens: int | None = None    # prompt tokens the prefix cache served
    cached_from: dict | None = None     # of them, the slot's and the prompt cache's tiers'
    parting: dict | None = None         # where the prompt parted from its key's cache
    tokens_per_s: float | None = None   # decode speed
    engine_ms: float | None = None      # the engine's own time (prefill + decode, or the
    #                                     transcriber's processing)
    output: str | None = None           # the answer's text (the request log at debug)
    transcribed_secs: float | None = None   # transcription: seconds of audio heard
    audio_secs: float | None = None     # speech: seconds of audio made
    ttfa_ms: float | None = None        # speech: engine start to first audio

    @property
    def lease(self) -> Lease | None:
        """The last lease taken (the request's model), None when it took none."""
        return self.leases[-1] if self.leases else None

    @property
    def owner(self) -> str:
        """Who owns what this request stores and whose cached prefixes it may reuse: the
        key's stable owner id (`keys.key_owner`), "" when keys are off (one partition)."""
        return self.api_key.owner if self.api_key is not None else ""

    @property
    def sees_all(self) -> bool:
        """Whether the request may read every owner's stored things: an admin key, or any
        request when keys are off."""
        return self.api_key is None or self.api_key.admin

    def owns(self, owner: str) -> bool:
        """Whether something stored by ``owner`` is visible to this request."""
        return self.sees_all or owner == self.owner

    @property
    def tokens(self) -> int:
        """What the key is charged: prompt plus completion tokens (0 when none counted)."""
        return (self.tokens_in or 0) + (self.tokens_out or 0)

    def chat(self, first: ChatResult, completion_tokens: int) -> None:
        """A chat answer: the first choice's figures, ``completion_tokens`` of every choice
        (the prompt is charged once)."""
        self.tokens_in, self.tokens_out = first.prompt_tokens, completion_tokens
        self.cached_tokens = first.cached_tokens
        self.cached_from, self.parting = first.cached_from, first.parting
        self.tokens_per_s = first.timings.decode_tokens_per_s
        self.engine_ms = (first.timings.prefill_ms or 0.0) + first.timings.decode_ms
        self.output = first.text

    def embedding(self, result: EmbedResult) -> None:
        self.tokens_in = result.prompt_tokens

    def transcription(self, result: TranscribeResult) -> None:
        self.transcribed_secs = result.duration_secs
        self.engine_ms = result.processing_ms or None
        self.output = result.text


def open_record(request, record: RequestRecord) -> None:
    """Attach ``record`` to ``request`` and make it the running task's (the HTTP layer's
    request middleware, once per request)."""
    request.ctx.record = record
    _current.set(record)


def record_of(request) -> RequestRecord:
    """The record of a request the middleware opened (every route handler's)."""
    record: RequestRecord = request.ctx.record
    return record


def opened_record(request) -> RequestRecord | None:
    """The request's record, or None when it failed before the request middleware ran
    (e.g. a path no route matches)."""
    return getattr(request.ctx, "record", None)


def current_record() -> RequestRecord | None:
    """The record of the request the running task serves, None outside a request."""
    return _current.get()
