"""Reading one llama job's tokens in the caller's thread: ``AnswerReader`` turns token text
into ``ChatDelta``s (stop strings, then thinking / content / tool calls), ``collect`` feeds it
until the job ends, a stop string is hit or the caller cancels, ``timings`` sums up the job.

``TokenEvents`` is the job's event queue when the reader takes tokens in batches: a token then
wakes the reader only when it asked for that, so a fast decode (a small model, a GPU) does not
pay a thread wake-up, and on a shared core a preemption of the decode thread, per token."""
from __future__ import annotations

import codecs
import queue
import threading
import time

from hypnos.engines.chat_format.stream import AnswerSplitter, StopMatcher
from hypnos.engines.errors import EngineError
from hypnos.engines.llama.decode_loop import DecodeLoop
from hypnos.engines.llama.slots import Job
from hypnos.engines.records import ChatDelta, ChatTimings, OnToken, TokenLogprob

#: How often a caller waiting for a slot or a token looks at its cancel Event (seconds).
CANCEL_POLL_S = 0.05
#: A reader, once it has handed on a batch, lets the tokens of the next this-many seconds
#: gather before it wakes (a wake-up per batch, not per token); the first token after an
#: idle wait wakes it at once.
STREAM_GATHER_S = 0.004


class TokenEvents(queue.Queue):
    """``Job.events`` read by one reader thread in batches (``take``). Put from the decode
    thread; unbounded, so ``put`` never blocks. A ``("token", ...)`` event wakes a waiting
    reader only while it waits eagerly; every other event ("done", "error") always does."""

    def __init__(self) -> None:
        super().__init__()
        self.eager = True

    def put(self, item, block: bool = True, timeout: float | None = None) -> None:
        with self.mutex:
            self._put(item)
            self.unfinished_tasks += 1
            if self.eager or item[0] != "token":
                self.not_empty.notify()

    def take(self, timeout: float, eager: bool) -> list:
        """Every queued event, oldest first. With none queued, waits up to ``timeout``
        seconds for one (a token ends the wait only when ``eager``); [] if none came."""
        with self.not_empty:
            if not self.queue:
                self.eager = eager
                try:
                    self.not_empty.wait(timeout)
                finally:
                    self.eager = True
            items = list(self.queue)
            self.queue.clear()
            return items


def next_events(events: queue.Queue, timeout: float, eager: bool) -> list:
    """What ``collect`` reads next: a batch from a ``TokenEvents``, one event from a plain
    queue (waiting up to ``timeout``); [] when nothing came."""
    if isinstance(events, TokenEvents):
        return events.take(timeout, eager)
    try:
        return [events.get(timeout=timeout)]
    except queue.Empty:
        return []


class AnswerReader:
    """Turns generated text into ``ChatDelta``s: stop strings first, then the splitter
    (thinking / content / tool calls). Keeps the whole answer for the final result."""

    def __init__(self, splitter: AnswerSplitter, stopper: StopMatcher,
                 on_delta: OnToken | None, logprobs: bool):
        self.splitter = splitter
        self.stopper = stopper
        self.on_delta = on_delta
        self.want_logprobs = logprobs
        self.pending: list[TokenLogprob] = []
        self.logprobs: list[TokenLogprob] = []
        self.content_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.reasoning_tokens = 0      # tokens read inside the thinking block, delimiters too

    @property
    def content(self) -> str:
        return "".join(self.content_parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    def token(self, text: str, raw: bytes, logprob) -> bool:
        """One token's text (and its logprob); False once a stop string was hit."""
        if self.want_logprobs and logprob is not None:
            entry = TokenLogprob(raw.decode("utf-8", "replace"), list(raw), logprob[0],
                                 [(b.decode("utf-8", "replace"), list(b), lp)
                                  for b, lp in logprob[1]])
            self.pending.append(entry)
            self.logprobs.append(entry)
        thinking = self.splitter.mode == "think"
        self._emit(self.splitter.feed(self.stopper.feed(text)))
        self.reasoning_tokens += thinking or self.splitter.mode == "think"
        return not self.stopper.hit

    def finish(self) -> None:
        self._emit(self.splitter.feed(self.stopper.flush()) + self.splitter.finish())
        if self.pending and self.on_delta is not None:
            self.on_delta(ChatDelta(logprobs=self.pending))
        self.pending = []

    def _emit(self, pieces) -> None:
        for piece in pieces:
            if piece.kind == "call":
                delta = ChatDelta(tool_call=piece.call)
            elif piece.kind == "reasoning":
                self.reasoning_parts.append(piece.text)
                delta = ChatDelta(reasoning=piece.text)
            else:
                self.content_parts.append(piece.text)
                delta = ChatDelta(content=piece.text)
            delta.logprobs, self.pending = self.pending, []
            if self.on_delta is not None:
                self.on_delta(delta)


def collect(loop: DecodeLoop, job: Job, reader: AnswerReader,
            cancel: threading.Event) -> tuple[str, int]:
    """Feed the job's tokens to ``reader`` until the job ends, a stop string is hit or
    ``cancel`` is set. Returns (finish_reason, tokens delivered). Incomplete UTF-8
    sequences are held back (and dropped if the answer ends inside one).

    With ``job.events`` a ``TokenEvents``, tokens are read in batches: the first token after
    an idle wait wakes the reader, which then lets ``STREAM_GATHER_S`` of tokens gather
    before it reads again (measured on a shared core: a reader that instead slept until the
    job's end, waking at the cancel poll only, slowed the decode thread to about 0.6x)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    delivered, eager = 0, True
    try:
        while True:
            if cancel.is_set():
                abandon(loop, job)
                reader.finish()
                return "cancelled", delivered
            batch = next_events(job.events, CANCEL_POLL_S if eager else STREAM_GATHER_S,
                                eager)
            eager = not batch
            for event in batch:
                kind, value = event[0], event[1]
                if kind == "done":
                    reader.finish()
                    return value, delivered
                if kind == "error":
                    raise EngineError(value)
                delivered += 1
                if not reader.token(decoder.decode(value), value, event[2]):
                    abandon(loop, job)            # a stop string: the rest is not wanted
                    reader.finish()
                    return "stop", delivered
    except BaseException:
        abandon(loop, job)                    # e.g. on_text raised: free the slot
        raise


def abandon(loop: DecodeLoop, job: Job) -> None:
    job.stop.set()                             # the decode thread frees the slot
    loop.withdraw(job)


def timings(job: Job, t_call: float) -> ChatTimings:
    """Wall-clock timings of a job (llama_perf_context reads zeros through the bindings)."""
    now = time.perf_counter()
    t_assigned = job.t_assigned or now             # never got a slot: queued until now
    t_first = job.t_first
    t_done = job.t_done or now
    prefill_s = (t_first - t_assigned) if t_first else 0.0
    decode_s = (t_done - t_first) if t_first else 0.0
    evaluated = len(job.prompt) - job.cached
    return ChatTimings(
        queue_ms=(t_assigned - job.t_submit) * 1e3,
        prefill_ms=prefill_s * 1e3,
        decode_ms=decode_s * 1e3,
        ttft_ms=(t_first - t_call) * 1e3 if t_first else 0.0,
        prefill_tokens_per_s=evaluated / prefill_s if prefill_s > 0 else 0.0,
        decode_tokens_per_s=(job.sampled - 1) / decode_s if decode_s > 0 else 0.0,
        cached_tokens=job.cached,
        concurrent_slots=max(job.concurrent, 1),
    )
