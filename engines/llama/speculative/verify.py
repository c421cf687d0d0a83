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
acceptance when the job ends. The rejected tail is removed from the slot's KV at once, so no
trace of it stays (the KV and ``slot.tokens`` hold what decoding without a draft would).
"""
from __future__ import annotations

from hypnos.engines.llama.slots import Slot


class SpeculativeSteps:
    """Mixed into ``DecodeLoop``, which provides ``ll``, ``ctx``, ``mem``, ``n_ctx_seq``,
    ``_on_token``, ``_sample`` and ``_logprob``. Decode thread only."""

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
        base = len(slot.tokens)            # draft[i] sits at position base + i
        kept = matched = 0
        for i in range(len(draft) + 1):
            token = self._sample(job, at + i)
            logprob = (self._logprob(at + i, token, job.logprobs)
                       if job.logprobs is not None else None)
            self._on_token(slot, token, logprob)
            hit = i < len(draft) and token == draft[i]
            matched += hit
            if not hit or slot.job is not job or job.pending != [token]:
                break
            kept += 1
            job.pending = []               # the token is in the KV already
        slot.tokens.extend(draft[:kept])
        if kept < len(draft):
            self.ll.llama_memory_seq_rm(self.mem, slot.seq_id, base + kept, -1)
        job.spec.drafted += len(draft)
        job.spec.accepted += matched
        job.spec.steps += 1
        job.drafter.on_accept(len(draft), matched, step_s)
