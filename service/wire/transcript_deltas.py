"""The deltas of a transcript heard while it is spoken (the realtime route's
``conversation.item.input_audio_transcription.delta``): the protocol's deltas are appended
text, never taken back, but each partial transcription of the speech so far is a new guess
that may change its last words. So a word is sent once two partials in a row agree on it and
on every word before it (the words both begin with), and only past what was sent.

When the turn is committed, the final transcription is authoritative (the ``completed``
event carries it whole): when it begins with the words sent, the rest is sent as the last
delta, so the deltas add up to it exactly; when it contradicts them, no delta follows and
the ``completed`` transcript replaces what the deltas said. Words are compared as written
("capital" and "capital?" differ); whitespace is one space between words. Pure.
"""
from __future__ import annotations


def words(text: str) -> list[str]:
    return text.split()


def spaced(text: str) -> str:
    """``text`` with one space between words, none around them (as deltas add up)."""
    return " ".join(text.split())


class TranscriptDeltas:
    def __init__(self) -> None:
        self.sent: list[str] = []       # the words the deltas said, in order
        self.guess: list[str] = []      # the last partial's words

    def _suffix(self, agreed: list[str]) -> str | None:
        """The delta that extends what was sent to ``agreed``; None when ``agreed`` does not
        begin with the sent words or adds nothing."""
        n = len(self.sent)
        if len(agreed) <= n or agreed[:n] != self.sent:
            return None
        self.sent = list(agreed)
        return (" " if n else "") + " ".join(agreed[n:])

    def partial(self, text: str) -> str | None:
        """A partial transcription of the speech so far: the delta to send, if any."""
        new = words(text)
        agreed: list[str] = []
        for a, b in zip(self.guess, new, strict=False):
            if a != b:
                break
            agreed.append(a)
        self.guess = new
        return self._suffix(agreed)

    def final(self, text: str) -> str | None:
        """The final transcription: the last delta, if it extends what was sent."""
        return self._suffix(words(text))
