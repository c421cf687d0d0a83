"""The decode loop's speculative decoding, a component it holds (``DecodeLoop.spec``):
``drafts`` asks every generating slot's drafter what it wants for the step (the loop puts the
drafts in the batch after each slot's pending token), ``verify`` checks them against the
target once the batch is decoded, and ``observe`` shows the decoded batch to a drafter that
reads the target's hidden states (MTP heads).

A drafter's ``plan`` answers with tokens now (prompt lookup, a prediction) or a ``Batched``
ask naming a shared ``BatchDrafter`` (a draft model's or the MTP heads' per-sequence view,
also behind ``auto``'s policy or prompt lookup in front); ``drafts`` asks each such source
once per step for all its slots (``propose_many``: one draft decode per draft step for every
slot, not one per slot). Nothing here looks at what type a drafter is.

Verification samples the target's token at every drafted position with the job's own sampler
chain (``llama_sampler_sample``: grammar, penalties and the seeded RNG advance exactly as
without speculation, one draw per kept token) and keeps a draft token iff the target picked
it. Sampled, that is speculative sampling for a point-mass draft (``accept``), so the
answer's distribution is the target's; a grammar-refused draft token is never picked, so it
ends the draft. Plain greedy (no sampler chain), the target picks the drafted token where its
logit is within ``accept.NEAR_TIE`` of the argmax's, a gap the batch shape alone moves. Every
kept token goes through ``_on_token`` in order (EOG, a forced call's closer, the thinking
budget, loops, max_tokens, stop), which stops the acceptance when the job ends. The rejected
tail is removed from the slot's KV at once (before a job that ended inside the verify is
reported done), so no trace of it stays: the KV and ``slot.tokens`` hold the kept tokens
only, as decoding them without a draft would.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hypnos.engines.llama.slots import Job, Slot
from hypnos.engines.llama.speculative import BatchDrafter, DraftRequest

if TYPE_CHECKING:
    from hypnos.engines.llama.decode_loop import DecodeLoop


class Speculative:
    """Speculative decoding for ``loop`` (its ``ll``, ``ctx``, ``mem``, ``n_batch``,
    ``n_ctx_seq``, ``forget``, ``_on_token``, ``_sample`` and ``_logprob``), which calls
    ``settle_held`` first thing in ``_finish``. Decode thread only.

    ``observer``: shown every decoded target batch (``MtpDrafter``), or None. A target with
    recurrent state rolls back at most its context's ``n_rs_seq`` positions, so no draft is
    longer there (``max_draft``)."""

    def __init__(self, loop: DecodeLoop, observer=None):
        ll, ctx = loop.ll, loop.ctx
        model = ll.llama_get_model(ctx)
        stateful = ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model)
        self.loop = loop
        self.observer = observer
        self.max_draft = int(ll.llama_n_rs_seq(ctx)) if stateful else loop.n_batch
        self.held: Held | None = None
        #: seq_id -> seconds its draft took to make this step (a model's decodes), for
        #: ``verify``
        self.draft_s: dict[int, float] = {}

    def observe(self, batch) -> None:
        """After every target ``llama_decode`` that returned 0 (``mtp``'s contract)."""
        if self.observer is not None:
            self.observer.observe_batch(batch, batch.n_tokens)

    def kv_replaced(self, slot: Slot) -> None:
        """The slot's KV was written from outside (a parked slot restored, a session
        imported): MTP heads hold nothing of it, so their stale rows go (a hole drafts
        worse, never wrong). A draft model follows its own token lists."""
        if self.observer is not None:
            self.observer.rollback(slot.seq_id, 0)

    def drafts(self, order: list[Slot]) -> dict[int, list[int]]:
        """seq_id -> draft for the slots of ``order`` (batch order) that draft this step,
        each within the batch room left before it (counting full drafts before it, so a
        shorter draft only leaves room). A ``BatchDrafter`` is asked once for all its slots."""
        n_batch, n, out = self.loop.n_batch, 0, {}
        self.draft_s.clear()
        groups: dict[int, tuple[BatchDrafter, list[tuple[Slot, DraftRequest]]]] = {}
        for slot in order:
            job = slot.job
            room = n_batch - n
            take = min(len(job.pending), room)
            k = self.draft_len(slot, room) if take == 1 and job.drafting is not None else 0
            n += max(take, 0) + k
            if k <= 0:
                continue
            context = slot.tokens + job.pending
            t0 = time.perf_counter()
            tokens, batched = job.drafting.drafter.plan(context, k)
            if batched is None:
                out[slot.seq_id] = tokens[:k]
                self.draft_s[slot.seq_id] = time.perf_counter() - t0
            elif batched.n_max > 0:
                ask = (batched.seq, context, min(k, batched.n_max))
                groups.setdefault(id(batched.source), (batched.source, []))[1].append(
                    (slot, ask))
        for source, asks in groups.values():
            t0 = time.perf_counter()
            drafts = source.propose_many([request for _, request in asks])
            spent = time.perf_counter() - t0       # every slot of the group waited for it
            for (slot, (_, _, k)), draft in zip(asks, drafts, strict=True):
                out[slot.seq_id] = draft[:k]
                self.draft_s[slot.seq_id] = spent
        return out

    def draft_len(self, slot: Slot, room: int) -> int:
        """How many tokens the slot may draft after its one pending token: at most
        ``room - 1`` (batch space), none past the job's ``max_tokens``, the slot's context
        or what the target can roll back (0: it does not draft)."""
        job = slot.job
        drafting = job.drafting
        if drafting is None or drafting.drafter is None or len(job.pending) != 1:
            return 0
        return max(0, min(drafting.stats.cap, room - 1, job.max_tokens - job.generated - 1,
                          self.loop.n_ctx_seq - len(slot.tokens) - 2, self.max_draft))

    def verify(self, slot: Slot, at: int, draft: list[int], step_s: float) -> None:
        """The batch held the slot's last token at index ``at`` and ``draft`` after it, with
        logits at each; ``slot.tokens`` already ends with that last token. ``step_s``: the
        seconds the batch's ``llama_decode`` took (for the drafter's bookkeeping)."""
        job, loop = slot.job, self.loop
        # A model's drafting time is the step's too (what ``auto`` weighs).
        step_s += self.draft_s.pop(slot.seq_id, 0.0)
        held = self.held = Held(slot, len(slot.tokens), draft, step_s)
        try:
            for i in range(len(draft) + 1):
                token = (loop._greedy_or_drafted(at + i, draft[i])
                         if i < len(draft) and job.sampling.plain_greedy
                         else loop._sample(job, at + i))
                logprob = (loop._logprob(at + i, token, job.logprobs)
                           if job.logprobs is not None else None)
                hit = i < len(draft) and token == draft[i]
                held.matched += hit
                loop._on_token(slot, token, logprob)
                if not hit or slot.job is not job or job.pending != [token]:
                    break
                held.kept += 1
                job.pending = []               # the token is in the KV already
        finally:
            self.held = None
        self.settle(held, job)

    def settle(self, held: Held, job: Job) -> None:
        """Keep the accepted drafts in ``slot.tokens``, cut the rest from the KV and count
        the step. Runs once per verify: at its end, or from ``_finish`` when the job ends
        inside it, so that the KV and the job's figures are final before its caller hears
        it is done (and reads them)."""
        if held.settled:
            return
        held.settled = True
        slot, draft = held.slot, held.draft
        slot.tokens.extend(draft[:held.kept])
        loop = self.loop
        if held.kept < len(draft) and not loop.ll.llama_memory_seq_rm(
                loop.mem, slot.seq_id, held.base + held.kept, -1):
            # Refused (a recurrent state past its snapshots): evaluate the context again.
            tokens = list(slot.tokens)
            loop.forget(slot)
            job.pending = tokens + job.pending
        stats = job.drafting.stats
        stats.drafted += len(draft)
        stats.accepted += held.matched
        stats.steps += 1
        job.drafting.drafter.on_accept(len(draft), held.matched, held.step_s)

    def settle_held(self, slot: Slot) -> None:
        """Called by ``_finish`` before it tells the caller: settle the verify in progress
        on ``slot``, if any."""
        held = self.held
        if held is not None and held.slot is slot and slot.job is not None:
            self.settle(held, slot.job)


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
