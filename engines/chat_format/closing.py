"""Keeping a forced call closable within ``max_tokens``: ``CallCloser`` follows the call's
grammar over the tokens the model writes and, when the next token would leave too few
tokens to close the call, gives the shortest valid end of the call instead (the open string
ended, the remaining required arguments given their shortest values, the call closed).

The rule it keeps: after ``g`` tokens, ``g`` plus the tokens of the closing from there is at
most ``max_tokens``. It holds at the start (``CallCloser.start`` declines a call whose
shortest form does not fit), and each sampled token is let through only if it keeps it; the
first that does not is replaced by the closing of the state before it, which fits. So a
forced call whose shortest form fits in ``max_tokens`` always ends as a whole call.

The decode thread calls ``offer`` once per sampled token (forced calls only); it costs the
grammar walk over the token's characters and, only near the end of the budget, one
tokenization of the closing text. Pure: the tokenizer is passed in.
"""
from __future__ import annotations

import codecs
import logging
from collections.abc import Callable

from hypnos.engines.chat_format.gbnf import Grammar, GrammarError, State, compile_gbnf

log = logging.getLogger(__name__)

#: Tokens a character split across tokens may still take (UTF-8 is at most 4 bytes).
_SPLIT_CHAR_TOKENS = 4


class CallCloser:
    """One forced call's grammar state and token budget (decode thread only)."""

    def __init__(self, grammar: Grammar, tokenize: Callable[[str], list[int]],
                 max_tokens: int):
        self.grammar = grammar
        self.tokenize = tokenize
        self.max_tokens = max_tokens
        self.state: State = grammar.start
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.watching = True
        self._tokens: list[int] | None = None       # the closing of ``state``, once known

    @classmethod
    def start(cls, gbnf: str, tokenize: Callable[[str], list[int]],
              max_tokens: int) -> CallCloser | None:
        """A closer for a call under ``gbnf``; None when the grammar cannot be read here or
        its shortest call takes more than ``max_tokens`` tokens (the call then runs as
        before: cut at max_tokens)."""
        try:
            grammar = compile_gbnf(gbnf)
        except (GrammarError, RecursionError) as exc:
            log.warning("forced-call grammar not followed (calls may be cut): %s", exc)
            return None
        closer = cls(grammar, tokenize, max_tokens)
        shortest = closer.closing_tokens()
        return None if shortest is None or len(shortest) > max_tokens else closer

    def closing_tokens(self) -> list[int] | None:
        """The tokens of the shortest text that ends the call from here ([] when it is
        whole); None when nothing does."""
        if self._tokens is None:
            text = self.grammar.closing(self.state)
            if text is None:
                return None
            self._tokens = self.tokenize(text) if text else []
        return self._tokens

    def offer(self, piece: bytes, generated: int) -> list[int] | None:
        """A sampled token's text as the grammar reads it (control tokens spelt out), with
        ``generated`` tokens delivered before it. None: deliver it (the state moves on). A
        list: deliver these tokens instead and end the answer, the call is closed."""
        if not self.watching:
            return None
        text = self.decoder.decode(piece)
        state = self.grammar.advance(self.state, text)
        if not state:               # the sampler admitted what this walk refuses: stand back
            log.warning("forced-call grammar walk lost the call; it may be cut at max_tokens")
            self.watching = False
            return None
        left = self.max_tokens - generated - 1
        split = self.decoder.getstate()[0] != b""
        need = self.grammar.closing_bytes(state)
        if need is not None and need + (_SPLIT_CHAR_TOKENS if split else 0) <= left:
            self.state, self._tokens = state, None     # a token spells at least one byte
            return None
        if not split and need is not None:
            text = self.grammar.closing(state) or ""
            tokens = self.tokenize(text) if text else []
            if len(tokens) <= left:
                self.state, self._tokens = state, tokens
                return None
        return self.closing_tokens() or []
