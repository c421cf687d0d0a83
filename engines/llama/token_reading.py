"""How the decode loop reads what the model wrote: the next token from a batch row's logits
(``_sample``: the job's sampler chain, or a plain argmax for plain greedy), a token's
log-probability and the likeliest alternatives (``_logprob``), a token's bytes (``_piece``,
rendered once per token and kept) and whether it ends an answer (``_ends_answer``, kept
too). A mixin over the loop's ``ll``, ``ctx`` and ``vocab``; decode thread only (its render
buffer is shared).
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from hypnos.engines.llama.slots import Job
from hypnos.engines.llama.speculative.accept import greedy_or_drafted


class TokenReading:
    """See the module."""

    def _init_reading(self) -> None:
        self._piece_buf = ctypes.create_string_buffer(256)
        # Per token, once: its bytes (both renderings) and whether it ends an answer.
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self._eog: dict[int, bool] = {}
        self._logits_row = ctypes.c_float * self.ll.llama_vocab_n_tokens(self.vocab)

    def _ends_answer(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(self.ll.llama_vocab_is_eog(self.vocab, token))
        return eog

    def _sample(self, job: Job, index: int) -> int:
        """The job's next token from the logits at batch ``index``, through its sampler chain
        (which then accepts it); a plain greedy job takes the argmax directly."""
        if job.sampling.plain_greedy:
            return self._greedy(index)
        return self.ll.llama_sampler_sample(job.sampler, self.ctx, index)

    def _greedy_or_drafted(self, index: int, drafted: int) -> int:
        """A plain greedy job's token at a drafted position (``accept.greedy_or_drafted``:
        the drafted token where it is within ``NEAR_TIE`` of the argmax)."""
        return greedy_or_drafted(self._logits(index), drafted)

    def _greedy(self, index: int) -> int:
        """The argmax of the raw logits at batch ``index`` (the first on a tie), which is what
        a plain greedy chain picks; its accept does nothing. ``llama_sampler_sample`` would
        first copy the whole vocabulary into a candidate array (~50 us a token at 49k)."""
        return int(self._logits(index).argmax())

    def _logits(self, index: int) -> np.ndarray:
        """The raw logits at batch ``index``, a view of llama.cpp's buffer (valid until the
        next decode)."""
        row = self.ll.llama_get_logits_ith(self.ctx, index)
        return np.frombuffer(self._logits_row.from_address(ctypes.addressof(row.contents)),
                             dtype=np.float32)

    def _logprob(self, index: int, token: int, top: int):
        """(logprob of ``token``, [(bytes, logprob) of the ``top`` likeliest]) from the raw
        logits at batch ``index``: the model's distribution before any sampler."""
        n_vocab = self.ll.llama_vocab_n_tokens(self.vocab)
        logits = np.ctypeslib.as_array(self.ll.llama_get_logits_ith(self.ctx, index),
                                       shape=(n_vocab,))
        peak = float(logits.max())
        lse = peak + math.log(float(np.exp(logits - peak).sum()))
        alternatives = []
        if top:
            ids = np.argpartition(-logits, top)[:top]
            ids = ids[np.argsort(-logits[ids])]
            alternatives = [(self._piece(int(i)), float(logits[i]) - lse) for i in ids]
        return float(logits[token]) - lse, alternatives

    def _piece(self, token: int, special: bool = False) -> bytes:
        """The token's bytes; special (control) tokens render as nothing, or as their text
        with ``special`` (as a grammar reads them)."""
        piece = self._pieces.get((token, special))
        if piece is None:
            piece = self._pieces[(token, special)] = self._render(token, special)
        return piece

    def _render(self, token: int, special: bool) -> bytes:
        buf = self._piece_buf
        n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]
