"""Sampling on llama.cpp for one job: the per-request ``Sampling`` settings, the sampler
chain built from them (``build_sampler``, ``grammar_sampler``), the thinking budget the decode
thread enforces (``ThinkBudget``) and the repetition-loop check (``repeating``)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
#: How many of the latest tokens (prompt included) the repetition penalties look at, as in
#: llama-server.
PENALTY_LAST_N = 64


@dataclass(frozen=True)
class Sampling:
    """Per-request sampling. ``temperature`` 0 means greedy; None picks the defaults."""
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_p: float | None = None
    grammar: str | None = None                  # GBNF, root rule "root"
    logit_bias: tuple[tuple[int, float], ...] = ()

    @functools.cached_property          # read at every decode step
    def plain_greedy(self) -> bool:
        """Greedy with nothing before the pick (no grammar, bias or penalties): the argmax."""
        return self.temperature is not None and self.temperature <= 0 and not self.grammar \
            and not self.logit_bias and not self.penalized

    @functools.cached_property
    def penalized(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty
                    or (self.repetition_penalty not in (None, 1.0)))


@dataclass(eq=False)
class ThinkBudget:
    """Counts thinking tokens on the decode thread and says when to close the block.
    ``state``: "maybe" (the model may still open it), "in", or "done"."""
    open: str
    close: str
    close_tokens: list[int]
    budget: int
    state: str = "maybe"
    count: int = 0
    text: str = ""

    def must_close(self, piece: str) -> bool:
        """Feed one generated token's text; True when the server must close the block now."""
        if self.state == "maybe":
            self.text += piece
            head = self.text.lstrip()
            if head.startswith(self.open):
                self.state, self.text = "in", ""
                return self._spent()
            if head and not self.open.startswith(head):
                self.state = "done"
            return False
        if self.state == "in":
            self.count += 1
            self.text = (self.text + piece)[-(len(self.close) + 16):]
            if self.close in self.text:
                self.state = "done"
                return False
            return self._spent()
        return False

    def _spent(self) -> bool:
        if self.count >= self.budget:
            self.state = "done"
            return True
        return False


def repeating(history: list[int], bound: int) -> bool:
    """True when the last ``bound`` tokens are one span repeated at least three times."""
    if len(history) < bound:
        return False
    tail = history[-bound:]
    return any(tail[p:] == tail[:-p] for p in range(1, bound // 3 + 1))


def grammar_sampler(ll, vocab, grammar: str):
    """A GBNF grammar sampler (root rule ``root``), or None when llama.cpp cannot parse
    ``grammar``. The caller frees it (or hands it to a chain)."""
    return ll.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root") or None


def build_sampler(ll, vocab, sampling: Sampling, history: list[int] = ()):
    """A sampler chain, in llama.cpp's order: logit bias -> grammar -> penalties -> greedy at
    temperature 0, else -> top-k -> top-p -> min-p -> temperature -> dist. The penalties see
    the last ``PENALTY_LAST_N`` tokens of ``history`` (the prompt) and then every sampled token.
    Raises ValueError for a grammar llama.cpp refuses. The caller frees the chain with
    ``llama_sampler_free``."""
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    add = lambda smpl: ll.llama_sampler_chain_add(chain, smpl)  # noqa: E731
    if sampling.logit_bias:
        biases = (ll.llama_logit_bias * len(sampling.logit_bias))(
            *(ll.llama_logit_bias(token, bias) for token, bias in sampling.logit_bias))
        add(ll.llama_sampler_init_logit_bias(ll.llama_vocab_n_tokens(vocab),
                                             len(sampling.logit_bias), biases))
    if sampling.grammar:
        grammar = grammar_sampler(ll, vocab, sampling.grammar)
        if grammar is None:
            ll.llama_sampler_free(chain)
            raise ValueError("invalid grammar")
        add(grammar)
    if sampling.penalized:
        penalties = ll.llama_sampler_init_penalties(
            ll.llama_vocab_n_tokens(vocab), PENALTY_LAST_N, sampling.repetition_penalty or 1.0,
            sampling.frequency_penalty or 0.0, sampling.presence_penalty or 0.0)
        for token in history[-PENALTY_LAST_N:]:
            ll.llama_sampler_accept(penalties, token)
        add(penalties)
    temperature = DEFAULT_TEMPERATURE if sampling.temperature is None else sampling.temperature
    if temperature <= 0:
        add(ll.llama_sampler_init_greedy())
        return chain
    top_k = DEFAULT_TOP_K if sampling.top_k is None else sampling.top_k
    top_p = DEFAULT_TOP_P if sampling.top_p is None else sampling.top_p
    seed = ll.LLAMA_DEFAULT_SEED if sampling.seed is None else sampling.seed & 0xFFFFFFFF
    add(ll.llama_sampler_init_top_k(top_k))
    add(ll.llama_sampler_init_top_p(top_p, 1))
    if sampling.min_p:
        add(ll.llama_sampler_init_min_p(sampling.min_p, 1))
    add(ll.llama_sampler_init_temp(temperature))
    add(ll.llama_sampler_init_dist(seed))
    return chain
