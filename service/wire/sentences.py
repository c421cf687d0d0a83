"""Cutting an answer's text into sentences as it streams, so each can be spoken as soon as
it is complete (the realtime route's TTS). Pure: text in, finished sentences out.

A sentence ends at ``.``, ``!``, ``?`` or ``…`` (with closing quotes or brackets after it)
followed by white space, or at a line break; a stretch longer than ``max_chars`` with no end
is cut at its last comma or space, so a run-on answer does not keep the voice waiting.

The answer's first piece may end sooner, at its first phrase break (a clause mark, or the
space before a word such as "in" or "which") with at least ``FIRST_WORDS`` words before it
(`engines.phrase_breaks`, which Kokoro's own splitter uses too): the voice starts as soon as
that phrase is written and spoken, instead of waiting for the whole first sentence (on a
2-core CPU Kokoro takes about 1.5 s for a 13-word sentence).
"""
from __future__ import annotations

import re

from hypnos.engines.phrase_breaks import FIRST_WORDS, first_break

# The end of a sentence: its mark (closers after it) and the white space that follows.
_END = re.compile(r"[.!?…]+[\"')\]”’]*\s+|\n+")
# "e.g. " or "Dr. ": a dot after these is not an end.
_NOT_ENDS = ("e.g", "i.e", "etc", "mr", "mrs", "ms", "dr", "vs", "st", "no")
MAX_CHARS = 200
MIN_CHARS = 2


class SentenceSplitter:
    """Feed text with ``push``; each call returns the sentences it completed, stripped, in
    order. ``flush`` returns what is left (the last sentence, which may have no end mark).
    ``first_words``: the first piece ends at a phrase break with that many words before it
    (0: it waits for its sentence's end like the rest)."""

    def __init__(self, max_chars: int = MAX_CHARS, first_words: int = FIRST_WORDS):
        self.max_chars, self.first_words = max_chars, first_words
        self.pending = ""
        self.started = False                # a piece was returned

    def push(self, text: str) -> list[str]:
        self.pending += text
        out: list[str] = []
        start = 0
        if not self.started and self.first_words:
            start = self._first_phrase(out)
        for m in _END.finditer(self.pending):
            piece = self.pending[start:m.end()]
            if _abbreviation(piece) or len(piece.strip()) < MIN_CHARS:
                continue
            out.append(piece.strip())
            start = m.end()
        self.pending = self.pending[start:]
        while len(self.pending) > self.max_chars:
            cut = _soft_cut(self.pending, self.max_chars)
            out.append(self.pending[:cut].strip())
            self.pending = self.pending[cut:]
        out = [s for s in out if s]
        self.started = self.started or bool(out)
        return out

    def _first_phrase(self, out: list[str]) -> int:
        """Before any piece: where a first phrase of ``first_words`` words ends in
        ``pending`` (appended to ``out``), if it ends before the first sentence does; else 0."""
        end = next((m.start() for m in _END.finditer(self.pending)
                    if not _abbreviation(self.pending[:m.end()])), len(self.pending))
        cut = first_break(self.pending[:end], self.first_words)
        if cut is None:
            return 0
        out.append(self.pending[:cut[0]].strip())
        return cut[1]

    def flush(self) -> str | None:
        rest, self.pending = self.pending.strip(), ""
        return rest or None


def _abbreviation(piece: str) -> bool:
    """Whether ``piece`` ends with a dot after a known abbreviation or a single letter."""
    words = piece.rstrip().split()
    if not words or not words[-1].endswith("."):
        return False
    word = words[-1].rstrip(".").lower()
    return word in _NOT_ENDS or (len(word) == 1 and word.isalpha())


def _soft_cut(text: str, limit: int) -> int:
    """Where to cut an over-long stretch: after its last comma, else its last space, else at
    ``limit``."""
    head = text[:limit]
    for mark in (", ", "; ", " "):
        at = head.rfind(mark)
        if at > limit // 3:
            return at + len(mark)
    return limit
