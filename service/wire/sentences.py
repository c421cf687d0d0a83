"""Cutting an answer's text into sentences as it streams, so each can be spoken as soon as
it is complete (the realtime route's TTS). Pure: text in, finished sentences out.

A sentence ends at ``.``, ``!``, ``?`` or ``…`` (with closing quotes or brackets after it)
followed by white space, or at a line break; a stretch longer than ``max_chars`` with no end
is cut at its last comma or space, so a run-on answer does not keep the voice waiting.
"""
from __future__ import annotations

import re

# The end of a sentence: its mark (closers after it) and the white space that follows.
_END = re.compile(r"[.!?…]+[\"')\]”’]*\s+|\n+")
# "e.g. " or "Dr. ": a dot after these is not an end.
_NOT_ENDS = ("e.g", "i.e", "etc", "mr", "mrs", "ms", "dr", "vs", "st", "no")
MAX_CHARS = 200
MIN_CHARS = 2


class SentenceSplitter:
    """Feed text with ``push``; each call returns the sentences it completed, stripped, in
    order. ``flush`` returns what is left (the last sentence, which may have no end mark)."""

    def __init__(self, max_chars: int = MAX_CHARS):
        self.max_chars = max_chars
        self.pending = ""

    def push(self, text: str) -> list[str]:
        self.pending += text
        out: list[str] = []
        start = 0
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
        return [s for s in out if s]

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
