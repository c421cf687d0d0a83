"""Prompt lookup across a respelling: structured output copies values out of prose, but a
value written after ``"`` or ``|`` loses the space it had in the sentence, and with it the
token: the prompt's `` data`` `` engineer`` comes back as ``data`` `` engineer``, so no exact
match ever starts there. ``Spelling`` names each token by its text without a leading space
(`` data`` and ``data`` are one name), and ``RespelledIndex`` finds the prompt's places
where the answer's last tokens stand under those names; the draft is what followed there
(`` engineer``, the rest of the value). Pure: ``vocabulary.llama_spelling`` builds a
``Spelling`` over a loaded model's vocabulary.
"""
from __future__ import annotations

from collections.abc import Callable

#: The answer's last tokens must agree, by name, with this many at a prompt place (one more
#: once this kind of draft has been mostly refused): one token alone is too common a guess.
RESPELLED_MIN = 2
#: A name at more places of the prompt than this is a common word, not a value: not drafted.
RESPELLED_PLACES = 4


class Spelling:
    """token -> its name: the token of the same text without the leading space, where the
    vocabulary has one, else the token itself. ``piece`` gives a token's text, ``single``
    the one token a text is (None when it takes several). Names are looked up once per
    token and kept."""

    def __init__(self, piece: Callable[[int], bytes], single: Callable[[bytes], int | None]):
        self.piece, self.single = piece, single
        self.names: dict[int, int] = {}

    def __call__(self, token: int) -> int:
        name = self.names.get(token)
        if name is None:
            text = self.piece(token) if token >= 0 else b""
            bare = self.single(text[1:]) if len(text) > 1 and text[:1] == b" " else None
            name = self.names[token] = token if bare is None else bare
        return name


class RespelledIndex:
    """The prompt's tokens (``tokens[:prompt_len]``) by name: name -> the positions right
    after it. Built on first use."""

    def __init__(self, name: Callable[[int], int], prompt_len: int):
        self.name, self.prompt_len = name, prompt_len
        self.after: dict[int, list[int]] | None = None

    def starts(self, context: list[int], need: int) -> list[int]:
        """The continuation starts (the latest first) of the prompt places where the last
        ``need`` tokens of ``context`` agree by name; none when the last token's name is at
        more than ``RESPELLED_PLACES`` places."""
        name = self.name
        if self.after is None:
            self.after = {}
            for e in range(1, min(self.prompt_len, len(context))):
                self.after.setdefault(name(context[e - 1]), []).append(e)
        places = self.after.get(name(context[-1]), ())
        if len(places) > RESPELLED_PLACES or len(context) < need:
            return []
        tail = [name(t) for t in context[-need:]]
        return [e for e in reversed(places)
                if e >= need and [name(t) for t in context[e - need:e]] == tail]
