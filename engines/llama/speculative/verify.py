"""The decode loop's half of speculative decoding (a base of ``DecodeLoop``): ``_draft`` asks
a slot's drafter for tokens to put in the batch after its pending token, ``_verify`` checks
them against the target once the batch is decoded.

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

from dataclasses import dataclass

from hypnos.engines.llama.slots import Slot


class SpeculativeSteps:
    """Mixed into ``DecodeLoop``, which provides ``ll``, ``ctx``, ``mem``, ``n_ctx_seq``,
    ``_on_token``, ``_sample`` and ``_logprob``, and calls ``_settle_held`` first thing in
    ``_finish``. Decode thread only."""

    _held: Held | None = None

    def _draft(self, slot: Slot, room: int) -> list[int]:
        """Tokens to check after the slot's one pending token, at most ``room - 1`` (batch
        space), none past the job's ``max_tokens`` or the slot's context."""
        job = slot.job
        if job.drafter is None or len(job.pending) != 1:
            return []
        k = min(job.spec.n_max, room - 1, job.max_tokens - job.generated - 1,
                self.n_ctx_seq - len(slot.tokens) - 2)
        if k <= 0:
            return []
        return job.drafter.propose(slot.tokens + job.pending, k)[:k]

    def _verify(self, slot: Slot, at: int, draft: list[int], step_s: float) -> None:
        """The batch held the slot's last token at index ``at`` and ``draft`` after it, with
        logits at each; ``slot.tokens`` already ends with that last token. ``step_s``: the
        seconds the batch's ``llama_decode`` took (for the drafter's bookkeeping)."""
        job = slot.job
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
        if held.kept < len(draft):
            self.ll.llama_memory_seq_rm(self.mem, slot.seq_id, held.base + held.kept, -1)
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
