"""Continuous batching over llama.cpp's low-level API: one decode thread, ``n`` slots.

``DecodeLoop`` owns a llama context for its whole life. Each slot is one KV sequence
(``seq_id`` = slot index) and remembers the tokens in its KV. Callers ``submit`` a ``Job``
from any thread; the job waits (FIFO) for a free slot, gets the free slot whose KV best
serves its prompt (``pick_slot``; only the tail after the common prefix is evaluated), and
from then on the decode thread evaluates every active slot's pending tokens in one
``llama_decode`` per step (prompt tails chunked to ``n_batch``).

Everything the decode thread learns about a job goes through ``job.events`` (a Queue):
``("token", bytes, logprob or None)`` per generated token, then ``("done", finish_reason)`` or
``("error", message)``. The job's timing fields are written before the final event. A job
that fails (its sampler, its cancel) ends alone; the other slots keep decoding.

Sessions: a job with a ``session_key`` goes to the slot bound to that key (bound on first use
to an unbound slot; ``SessionCapacity`` when every slot is bound). A job without a key takes
a bound slot only when no unbound slot is free. ``call`` runs a function on the decode thread
between two steps, with every slot's KV and token list consistent: parking, restoring and
session export/import go through it.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from typing import TypeVar
from collections.abc import Callable


from hypnos.engines.llama.checkpoints import Trimming
from hypnos.engines.llama.compute_threads import IDLE_EXIT_S
from hypnos.engines.llama.prompt_cache import ModelCache
from hypnos.engines.llama.prompt_reuse import CachedPrefixes
from hypnos.engines.llama.sampling import build_sampler
from hypnos.engines.llama.slots import Job, Slot, SlotQueue
from hypnos.engines.llama.speculative.verify import Speculative
from hypnos.engines.llama.token_reading import TokenReading
from hypnos.engines.llama.token_rules import TokenRules

#: How often a loop whose every job is paused (``Job.pause``) looks whether one may go on.
PAUSE_POLL_S = 0.005

log = logging.getLogger(__name__)

T = TypeVar("T")


class DecodeLoop(SlotQueue, Trimming, CachedPrefixes, TokenReading, TokenRules):
    """The decode thread and its slots. ``ll`` is the ``llama_cpp.llama_cpp`` module.
    A job with ``drafting`` gets its drafts checked in the same batches by ``spec`` (a
    ``verify.Speculative``); ``observer`` (an ``MtpDrafter``, or None) is shown every batch
    the target decoded.
    ``drafts`` (a ``DraftModel`` or ``MtpDrafter``: ``rollback(seq_id, keep)``, or None) keeps
    rows of its own per slot; they are emptied when the slot passes to another partition.
    ``swa_full``: the context's sliding-window cache is full-sized (llama.cpp's default);
    else a sliding-window model takes context checkpoints (``checkpoints``), as a recurrent
    or hybrid one always does. ``cache`` (a ``ModelCache``, or None) keeps the prefixes
    slots lose and gives them back (``prompt_reuse``).

    ``submit`` and ``withdraw`` are called from any thread and never block on decoding;
    ``close`` stops the thread (blocks until it exits) and fails jobs still in flight.
    The caller frees ``ctx`` after ``close``.
    """

    def __init__(self, ll, ctx, vocab, n_slots: int, n_batch: int, observer=None,
                 drafts=None, swa_full: bool = True, cache: ModelCache | None = None):
        self.ll = ll
        self.ctx = ctx
        self.vocab = vocab
        self.mem = ll.llama_get_memory(ctx)
        self.n_batch = n_batch
        self.n_ctx_seq = ll.llama_n_ctx_seq(ctx)
        self.slots = [Slot(i) for i in range(n_slots)]
        self.waiting: collections.deque[Job] = collections.deque()
        self.calls: collections.deque = collections.deque()
        self.cond = threading.Condition(threading.RLock())
        self.closing = False
        # llama_decode calls that returned, and the positions they evaluated (prompt and
        # generated tokens, drafts included; not media prefills): read from any thread.
        self.steps = 0
        self.evaluated = 0
        self.batch = ll.llama_batch_init(n_batch, 0, 1)
        self.spec = Speculative(self, observer)
        self._init_checkpoints(swa_full)
        self.drafts = drafts
        self.cache = cache
        self._init_reading()
        # The decode thread: started by the first job or call, ended after ``IDLE_EXIT_S``
        # with nothing to do (``compute_threads``: an idle thread's OpenMP team would slow
        # every other model's compute). None while there is none.
        self.thread: threading.Thread | None = None

    @property
    def observer(self):
        """What every decoded target batch is shown to (``spec.observer``), or None."""
        return self.spec.observer

    # ------------------------------------------------------------ any thread

    def submit(self, job: Job) -> None:
        """Queue ``job``. Raises SessionCapacity when its session key is new and every slot
        is bound to another key."""
        with self.cond:
            if self.closing:
                raise RuntimeError("decode loop closed")
            if job.session_key is not None:
                job.target = self.bind_locked(job.session_key, job.prompt,
                                              partition=job.partition,
                                              yields=job.session_yields)
            self.waiting.append(job)
            if job.group is not None:
                self._gather_locked(job.group.key)
            self._assign_locked()
            self._wake_locked()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the decode thread between two steps, holding ``cond``, and return
        its result (or raise its exception). Blocks until it ran (at most one step's time
        plus ``fn``'s). Raises RuntimeError once the loop is closed."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self.cond:
            if self.closing:
                raise RuntimeError("decode loop closed")
            self.calls.append((fn, future))
            self._wake_locked()
        return future.result()

    def _wake_locked(self) -> None:
        """Tell the decode thread there is work, starting one if none is running."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="llama-decode", daemon=True)
            self.thread.start()
        self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
            thread = self.thread
        if thread is not None:
            thread.join()
        with self.cond:
            for job in list(self.waiting):
                job.events.put(("error", "model unloaded"))
            self.waiting.clear()
            for _, future in self.calls:
                future.set_exception(RuntimeError("decode loop closed"))
            self.calls.clear()
        for slot in self.slots:
            if slot.job is not None:
                self._finish(slot, error="model unloaded")
        self.ll.llama_batch_free(self.batch)

    # ------------------------------------------------------------ decode thread

    def _run(self) -> None:
        while True:
            with self.cond:
                idle_out = False
                while True:
                    overdue = self._release_stale_groups_locked()
                    self._assign_locked()
                    if self.closing or self.calls or any(s.job for s in self.slots):
                        break
                    if idle_out:                 # nothing came: end; a job starts another
                        self.thread = None
                        return
                    woken = self.cond.wait(IDLE_EXIT_S if overdue is None else overdue)
                    idle_out = not woken and overdue is None
                if self.closing:
                    return
                while self.calls:
                    fn, future = self.calls.popleft()
                    try:
                        future.set_result(fn())
                    except BaseException as exc:      # handed to the caller
                        future.set_exception(exc)
                active = [s for s in self.slots if s.job is not None]
                jobs = [s.job for s in active]
            if not active:
                continue
            try:
                self._step(active)
            except Exception as exc:          # keep serving: fail this step's jobs only
                log.exception("llama decode step failed")
                for slot, job in zip(active, jobs, strict=True):
                    if slot.job is job:
                        self.forget(slot)
                        self._finish(slot, error=f"decode failed: {exc}")

    def _step(self, active: list[Slot]) -> None:
        for slot in active:
            if not slot.job.started:
                try:
                    self._start(slot)
                except Exception as exc:          # this job only
                    log.exception("llama job start failed")
                    self.forget(slot)
                    self._finish(slot, error=f"could not start: {exc}")
        running, paused = [], False
        for slot in active:
            if slot.job is None:
                continue
            if slot.job.stop.is_set():
                self._finish(slot, "cancelled")
            elif slot.job.pause is not None and slot.job.pause.is_set():
                paused = True
            else:
                running.append(slot)
        entries = self._fill_batch(running)
        if not entries:
            if paused:                  # only paused jobs: look again shortly, computing nothing
                time.sleep(PAUSE_POLL_S)
            return
        t0 = time.perf_counter()
        rc = self.ll.llama_decode(self.ctx, self.batch)
        step_s = time.perf_counter() - t0
        self.steps += 1
        if rc != 0:
            for slot, *_ in entries:
                self.forget(slot)
                self._finish(slot, error=f"llama_decode returned {rc}")
            return
        self.evaluated += self.batch.n_tokens
        self.spec.observe(self.batch)
        for slot, n_taken, logits_at, draft in entries:
            job = slot.job
            slot.tokens.extend(job.pending[:n_taken])
            del job.pending[:n_taken]
            if job.checkpoint_at:
                self._checkpoint_due(slot)
            job.concurrent = max(job.concurrent, len(entries))
            if draft:
                self.spec.verify(slot, logits_at, draft, step_s)
            elif logits_at is not None:
                drafter = (job.drafting.drafter
                           if job.drafting is not None and n_taken == 1 else None)
                token = self._sample(job, logits_at)
                logprob = (self._logprob(logits_at, token, job.logprobs)
                           if job.logprobs is not None else None)
                self._on_token(slot, token, logprob)
                if drafter is not None:
                    drafter.on_accept(0, 0, step_s)

    def _fill_batch(self, running: list[Slot]) -> list[tuple[Slot, int, int | None, list[int]]]:
        """Put each running slot's pending tokens in the batch, and a generating slot's
        draft (``spec.drafts``) after its token (logits at each). The batch's room goes to
        single tokens first; in the batch the slots are in sequence order, because llama.cpp
        cuts a batch over several KV streams into ubatches of consecutive sequence ids (one
        forward pass each): three decoders and a prompt chunk out of that order cost a pass
        more per step. Returns (slot, tokens taken, batch index of its logits or None, the
        draft)."""
        batch, budget, n = self.batch, self.n_batch, 0
        order = sorted(running, key=lambda s: len(s.job.pending))
        drafts = self.spec.drafts(order)
        takes = {}
        for slot in order:
            take = min(len(slot.job.pending), budget - n, self._prefill_room(slot))
            if take > 0:
                takes[slot.seq_id] = take
                n += take + (len(drafts.get(slot.seq_id, [])) if take == 1 else 0)
        entries, n = [], 0
        for slot in sorted((s for s in order if s.seq_id in takes), key=lambda s: s.seq_id):
            pending, take = slot.job.pending, takes[slot.seq_id]
            draft = drafts.get(slot.seq_id, []) if take == 1 else []
            pos0 = len(slot.tokens)
            for i, token in enumerate(pending[:take] + draft):
                batch.token[n + i] = token
                batch.pos[n + i] = pos0 + i
                batch.n_seq_id[n + i] = 1
                batch.seq_id[n + i][0] = slot.seq_id
                batch.logits[n + i] = int(i >= take - 1 and take == len(pending))
            last = take == len(pending)
            entries.append((slot, take, n + take - 1 if last else None, draft))
            n += take + len(draft)
        batch.n_tokens = n
        return entries

    def _start(self, slot: Slot) -> None:
        """Trim the slot's KV to the reusable prefix (none of another partition's: the
        slot's KV is then cleared; on a recurrent or sliding-window model, the latest
        checkpoint within it: ``_trim``), plan the prefill's checkpoints and set up the
        job's sampler. The slot's KV is the job's partition's from here on. With a prompt
        cache, what the slot loses goes there first, and a longer cached prefix of the job's
        partition replaces the slot's KV (``prompt_reuse``)."""
        job = slot.job
        keep = min(slot.prefix_for(job.prompt, job.partition), len(job.prompt) - 1)
        found = self._cache_best(job)
        job.parting = self._parting(job, found)
        self._stash(slot, 0 if job.prefill is not None else keep)    # the prompt cache
        self.claim(slot, job.partition)
        if job.prefill is not None:
            self._start_prefilled(slot)
            return
        keep, source = self._restore_cached(slot, job, keep, found)
        keep = self._trim(slot, keep)
        self._plan_checkpoints(slot, job)
        job.cached = keep
        job.cached_from = {"slot": 0, "ram": 0, "disk": 0, source: keep}
        job.pending = list(job.prompt[keep:])
        job.started = True
        job.sampler = build_sampler(self.ll, self.vocab, job.sampling, job.prompt)
        drafting = job.drafting
        if drafting is not None and drafting.drafter is None \
                and drafting.drafter_for is not None:
            drafting.drafter = drafting.drafter_for(slot.seq_id)

    def _start_prefilled(self, slot: Slot) -> None:
        """A prompt with media: evaluated whole by ``job.prefill`` (the other slots wait
        for it), then the first token is sampled from its last logits."""
        job = slot.job
        self.forget(slot)
        job.drafting = None                        # its positions are not its tokens
        job.sampler = build_sampler(self.ll, self.vocab, job.sampling, [])
        n_past = job.prefill(self.ctx, slot.seq_id)
        slot.tokens = [-1] * n_past              # placeholders: never a prefix match
        job.cached, job.pending, job.started = 0, [], True
        token = self.ll.llama_sampler_sample(job.sampler, self.ctx, -1)
        logprob = self._logprob(-1, token, job.logprobs) if job.logprobs is not None else None
        self._on_token(slot, token, logprob)

    def claim(self, slot: Slot, partition: str) -> None:
        """The slot's KV holds ``partition``'s tokens from now on. When it held another's, its
        checkpoints and a model drafter's own rows of the slot go too (they would serve a
        prefix of the old text)."""
        if slot.partition != partition:
            slot.checkpoints.clear()
            if self.drafts is not None:
                self.drafts.rollback(slot.seq_id, 0)
        slot.partition = partition

    def forget(self, slot: Slot) -> None:
        """Drop the slot's whole KV sequence and its checkpoints (after a failure its
        content is unknown)."""
        self.ll.llama_memory_seq_rm(self.mem, slot.seq_id, -1, -1)
        slot.tokens.clear()
        slot.checkpoints.clear()

    def _kept_below(self, slot: Slot) -> bool:
        return CachedPrefixes._kept_below(self, slot)     # before SlotQueue's (no cache)

    def kv_replaced(self, slot: Slot) -> None:
        """The slot's KV was written from outside (a parked slot restored, a session
        imported, a cached prefix loaded): its checkpoints describe the old text and go (a
        caller that has the new text's sets ``slot.checkpoints`` after this call)."""
        slot.checkpoints.clear()
        self.spec.kv_replaced(slot)

    def _finish(self, slot: Slot, reason: str | None = None, error: str | None = None) -> None:
        """Free the slot at once (the next waiting job gets it) and tell the caller."""
        self.spec.settle_held(slot)
        job = slot.job
        job.t_done = time.perf_counter()
        if job.sampler is not None:
            self.ll.llama_sampler_free(job.sampler)
            job.sampler = None
        if job.drafting is not None and job.drafting.drafter is not None:
            job.drafting.drafter.close()
        with self.cond:
            slot.job = None
            slot.last_used = job.t_done
            if not self.closing:
                self._assign_locked()
        job.events.put(("error", error) if error else ("done", reason))
