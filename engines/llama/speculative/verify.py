"""The decode loop's half of speculative decoding (a base of ``DecodeLoop``): ``_fill_batch``
asks every generating slot's drafter for tokens to put in the batch after its pending token,
``_verify`` checks them against the target once the batch is decoded, and ``_observe`` shows
the decoded batch to a drafter that reads the target's hidden states (MTP heads).

Model drafters draft every slot at once: a drafter with ``batched()`` (a draft model's or the
MTP heads' per-sequence view) names a shared ``BatchDrafter``, and ``_drafts`` asks each such
source once per step for all its slots (``propose_many``: one draft decode per draft step for
every slot, not one per slot); n-gram and prediction drafters are asked one by one.

Verification samples the target's token at every drafted position with the job's own sampler
chain (``llama_sampler_sample``: grammar, penalties and the seeded RNG advance exactly as
without speculation, one draw per kept token) and keeps a draft token iff the target picked
it. Greedy, that is exact match; sampled, it is speculative sampling for a point-mass draft
(``accept``), so the answer's distribution is the target's; a grammar-refused draft token is
never picked, so it ends the draft. Every kept token goes through ``_on_token`` in order
(EOG, a forced call's closer, the thinking budget, loops, max_tokens, stop), which stops the
acceptance when the job ends. The rejected tail is removed from the slot's KV at once (before
a job that ended inside the verify is reported done), so no trace of it stays: the KV and
``slot.tokens`` hold what decoding without a draft would.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hypnos.engines.llama.slots import Slot
from hypnos.engines.llama.speculative.drafts import LookupFirst
from hypnos.engines.llama.speculative.tuning import AutoDrafter

#: (sequence id, its context: the slot's tokens plus its pending one, the draft length cap)
DraftRequest = tuple[int, Sequence[int], int]


class BatchDrafter(Protocol):
    """A drafter of several sequences at once (``DraftModel``, ``MtpDrafter``): the drafts of
    ``requests`` (distinct sequences), in order, each at most its cap."""

    def propose_many(self, requests: Sequence[DraftRequest]) -> list[list[int]]: ...


def batch_request(drafter, k: int) -> tuple[BatchDrafter, int, int] | None:
    """(shared source, sequence, draft length) when ``drafter``'s drafts come from a
    ``BatchDrafter`` (``drafter.batched()``, also behind a ``LookupFirst``, whose model drafts
    at most its ``n_model``, and inside ``auto``'s wrapper, whose policy then caps the length
    as its own ``propose`` would), else None: ask it alone."""
    inner = drafter
    if isinstance(inner, LookupFirst):
        k, inner = min(k, inner.n_model), inner.model
    if isinstance(inner, AutoDrafter):
        k, inner = min(k, inner.stats.n_for_next()), inner.inner
    batched = getattr(inner, "batched", None)
    if batched is None:
        return None
    source, seq = batched()
    return source, seq, k


class SpeculativeSteps:
    """Mixed into ``DecodeLoop``, which provides ``ll``, ``ctx``, ``mem``, ``batch``,
    ``n_batch``, ``n_ctx_seq``, ``forget``, ``_on_token``, ``_sample``, ``_logprob`` and
    ``_prefill_room`` (a prefill's batch ends where a checkpoint is due), and
    calls ``_settle_held`` first thing in ``_finish``. Decode thread only."""

    _held: Held | None = None
    #: seq_id -> seconds its draft took to make this step (a model's decodes), for ``_verify``
    _draft_s: dict[int, float]

    def _init_speculative(self, observer) -> None:
        """``observer``: shown every decoded target batch (``MtpDrafter``), or None. A target
        with recurrent state rolls back at most its context's ``n_rs_seq`` positions, so no
        draft is longer there."""
        ll, model = self.ll, self.ll.llama_get_model(self.ctx)
        stateful = ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model)
        self.observer = observer
        self._draft_s = {}
        self.max_draft = int(ll.llama_n_rs_seq(self.ctx)) if stateful else self.n_batch

    def _observe(self) -> None:
        """After every target ``llama_decode`` that returned 0 (``mtp``'s contract)."""
        if self.observer is not None:
            self.observer.observe_batch(self.batch, self.batch.n_tokens)

    def kv_replaced(self, slot: Slot) -> None:
        """The slot's KV was written from outside (a parked slot restored, a session
        imported): MTP heads hold nothing of it, so their stale rows go (a hole drafts
        worse, never wrong). A draft model follows its own token lists."""
        if self.observer is not None:
            self.observer.rollback(slot.seq_id, 0)

    def _fill_batch(self, running: list[Slot]) -> list[tuple[Slot, int, int | None, list[int]]]:
        """Put each running slot's pending tokens in the batch, single tokens first, and a
        generating slot's draft after its token (logits at each). Returns (slot, tokens
        taken, batch index of its logits or None, the draft)."""
        batch, budget, n = self.batch, self.n_batch, 0
        order = sorted(running, key=lambda s: len(s.job.pending))
        drafts = self._drafts(order)
        entries = []
        for slot in order:
            pending = slot.job.pending
            take = min(len(pending), budget - n, self._prefill_room(slot))
            if take <= 0:
                continue
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

    def _drafts(self, order: list[Slot]) -> dict[int, list[int]]:
        """seq_id -> draft for the slots of ``order`` (batch order) that draft this step,
        each within the batch room left before it (counting full drafts before it, so a
        shorter draft only leaves room). A ``BatchDrafter`` is asked once for all its slots."""
        n, out = 0, {}
        self._draft_s.clear()
        groups: dict[int, tuple[BatchDrafter, list[tuple[Slot, DraftRequest]]]] = {}
        for slot in order:
            room = self.n_batch - n
            take = min(len(slot.job.pending), room)
            k = self._draft_len(slot, room) if take == 1 else 0
            n += max(take, 0) + k
            if k <= 0:
                continue
            context = slot.tokens + slot.job.pending
            drafter = slot.job.drafter
            if isinstance(drafter, LookupFirst):
                copy = drafter.first(context, k)
                if copy:
                    out[slot.seq_id] = copy[:k]
                    continue
            shared = batch_request(drafter, k)
            if shared is None:
                t0 = time.perf_counter()
                out[slot.seq_id] = drafter.propose(context, k)[:k]
                self._draft_s[slot.seq_id] = time.perf_counter() - t0
            elif shared[2] > 0:
                source, seq, k = shared
                groups.setdefault(id(source), (source, []))[1].append((slot, (seq, context, k)))
        for source, asks in groups.values():
            t0 = time.perf_counter()
            drafts = source.propose_many([request for _, request in asks])
            spent = time.perf_counter() - t0       # every slot of the group waited for it
            for (slot, (_, _, k)), draft in zip(asks, drafts, strict=True):
                out[slot.seq_id] = draft[:k]
                self._draft_s[slot.seq_id] = spent
        return out

    def _draft_len(self, slot: Slot, room: int) -> int:
        """How many tokens the slot may draft after its one pending token: at most
        ``room - 1`` (batch space), none past the job's ``max_tokens``, the slot's context
        or what the target can roll back (0: it does not draft)."""
        job = slot.job
        if job.drafter is None or len(job.pending) != 1:
            return 0
        return max(0, min(job.spec.cap, room - 1, job.max_tokens - job.generated - 1,
                          self.n_ctx_seq - len(slot.tokens) - 2, self.max_draft))

    def _verify(self, slot: Slot, at: int, draft: list[int], step_s: float) -> None:
        """The batch held the slot's last token at index ``at`` and ``draft`` after it, with
        logits at each; ``slot.tokens`` already ends with that last token. ``step_s``: the
        seconds the batch's ``llama_decode`` took (for the drafter's bookkeeping)."""
        job = slot.job
        # A model's drafting time is the step's too (what ``auto`` weighs).
        step_s += self._draft_s.pop(slot.seq_id, 0.0)
        held = self._held = Held(slot, len(slot.tokens), draft, step_s)
        try:
            for i in range(len(draft) + 1):
                token = self._sample(job, at + i)
                logprob = (self._logprob(at + i, token, job.logprobs)
                           if job.logprobs is not None else None)
                hit = i < len(draft) and token == draft[i]
                held.matched += hit
                self._on_token(slot, token, logprob)
                if not hit or slot.job is not job or job.pending != [token]:
                    break
                held.kept += 1
                job.pending = []               # the token is in the KV already
        finally:
            self._held = None
        self._settle(held, job)

    def _settle(self, held: Held, job) -> None:
        """Keep the accepted drafts in ``slot.tokens``, cut the rest from the KV and count
        the step. Runs once per verify: at its end, or from ``_finish`` when the job ends
        inside it, so that the KV and the job's figures are final before its caller hears
        it is done (and reads them)."""
        if held.settled:
            return
        held.settled = True
        slot, draft = held.slot, held.draft
        slot.tokens.extend(draft[:held.kept])
        if held.kept < len(draft) and not self.ll.llama_memory_seq_rm(
                self.mem, slot.seq_id, held.base + held.kept, -1):
            # Refused (a recurrent state past its snapshots): evaluate the context again.
            tokens = list(slot.tokens)
            self.forget(slot)
            job.pending = tokens + job.pending
        job.spec.drafted += len(draft)
        job.spec.accepted += held.matched
        job.spec.steps += 1
        job.drafter.on_accept(len(draft), held.matched, held.step_s)

    def _settle_held(self, slot: Slot) -> None:
        """Called by ``_finish`` before it tells the caller: settle the verify in progress
        on ``slot``, if any."""
        held = self._held
        if held is not None and held.slot is slot and slot.job is not None:
            self._settle(held, slot.job)


@dataclass
class Held:
    """A verify in progress: ``draft`` sits in the slot's KV from position ``base``;
    ``kept`` tokens of it are accepted so far, ``matched`` picked by the target."""
    slot: Slot
    base: int
    draft: list[int]
    step_s: float
    kept: int = 0
    matched: int = 0
    settled: bool = False
