"""What the decode loop does with each token the model picked for a job (``_on_token``), in
order: an end-of-generation token finishes the job "stop"; a forced call's closer may end the
call instead (``_close_call``: the closing is delivered, not decoded); else the token is
counted and delivered, the thinking budget may write its closing delimiter, a repetition
loop finishes "repetition_loop" and ``max_tokens`` finishes "length". A mixin over the
loop's ``ll``, ``_piece``, ``_ends_answer`` and ``_finish``; decode thread only.
"""
from __future__ import annotations

import time

from hypnos.engines.llama.sampling import repeating
from hypnos.engines.llama.slots import Slot


class TokenRules:
    """See the module."""

    def _on_token(self, slot: Slot, token: int, logprob=None) -> None:
        job = slot.job
        job.sampled += 1
        if job.t_first is None:
            job.t_first = time.perf_counter()
        if self._ends_answer(token):
            self._finish(slot, "stop")
            return
        rules = job.rules
        if rules.closer is not None:
            closing = rules.closer.offer(self._piece(token, special=True), job.generated)
            if closing is not None:
                self._close_call(slot, closing)
                return
        job.generated += 1
        piece = self._piece(token)
        job.events.put(("token", piece, logprob))
        job.pending = [token]
        think = rules.think
        if think is not None and think.must_close(piece.decode("utf-8", "ignore")):
            # The thinking budget is spent: the server writes the closing delimiter and
            # the model goes on with the answer.
            for forced in think.close_tokens:
                self.ll.llama_sampler_accept(job.sampler, forced)
                job.events.put(("token", self._piece(forced), None))
            job.generated += len(think.close_tokens)
            job.pending = [token, *think.close_tokens]
        if rules.repetition_bound:
            rules.history.append(token)
            if job.generated % 4 == 0 and repeating(rules.history, rules.repetition_bound):
                self._finish(slot, "repetition_loop")
                return
        if job.generated >= job.max_tokens:
            self._finish(slot, "length")

    def _close_call(self, slot: Slot, closing: list[int]) -> None:
        """End a forced call with ``closing`` (``CallCloser.offer``) instead of the token just
        sampled, and finish "length" (the engine reads the call and answers "tool_calls").
        The closing is delivered, not decoded: the slot's KV and ``slot.tokens`` keep what
        the model itself wrote, so a later prompt reuses that prefix and evaluates the rest."""
        job = slot.job
        for token in closing:
            job.events.put(("token", self._piece(token), None))
        job.generated += len(closing)
        job.rules.closed_call = True
        self._finish(slot, "length")
