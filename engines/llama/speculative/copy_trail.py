"""Where an answer that was copying its context left the copy (``CopyTrail``): an edit. A
config returned "with the port changed to 8081" copies ``port = 808`` and then writes ``1``
where the source had ``0``; the answer then goes on with the source's next line, but no 5
tokens in a row match there until 5 tokens later (and ``8081`` may match the instruction
instead, whose continuation is prose). So after the answer leaves a copy, the source past
the token it replaced is the draft (one token written for one), and on the next few steps,
where the answer's last token stands a little further in the source (a value replaced by a
longer one), what follows it there. Pure: positions in the context, no model.
"""
from __future__ import annotations

from hypnos.engines.llama.speculative.ngram_index import before_control

#: How far past the token it replaced the answer's last token is looked for in the source.
EDIT_AHEAD = 16
#: For how many answer tokens after leaving the copy the trail is followed.
EDIT_STEPS = 8
#: A copy is left only once it held for this many tokens: prose matches a few words of its
#: context here and there and goes its own way, which is no edit.
HELD_MIN = 4


class CopyTrail:
    """Told each step whether its draft was copied from the context and from where
    (``drafted``), it finds the steps where the answer left that copy (``observe``: the
    token the target wrote after the accepted ones differs from the source's there) and
    says where the source goes on (``resume``)."""

    def __init__(self, controls: frozenset[int] = frozenset()):
        #: Control tokens (``drafts.NgramDrafter``'s): a copy that reached one reached its
        #: message's end, which is no edit, and the trail never looks past one.
        self.controls = controls
        # (source position of the token after the accepted ones, context position where
        # the target wrote its own), resolved by the next ``observe``.
        self.pending: tuple[int, int] | None = None
        # (source position of the token the answer replaced, context length then).
        self.left: tuple[int, int] | None = None
        self.held = 0                   # tokens the copy in progress held so far
        self.next_source: int | None = None    # where that copy goes on

    def drafted(self, source: int | None, accepted: int, context_len: int,
                resumed: bool = False) -> None:
        """A step verified a draft copied from ``source`` (None: from elsewhere, or no
        draft) on a context of ``context_len`` tokens and kept ``accepted`` of it;
        ``resumed``: a draft from ``resume``, which goes on with the copy that was left."""
        if source is None:
            self.pending, self.held, self.next_source = None, 0, None
            return
        self.held = (self.held + accepted if resumed or source == self.next_source
                     else accepted)
        self.next_source = source + accepted + 1
        self.pending = (source + accepted, context_len + accepted)

    def observe(self, context: list[int]) -> None:
        """Reads what the last step wrote (idempotent for one context)."""
        if self.pending is not None and len(context) > self.pending[1]:
            at, wrote = self.pending
            self.pending = None
            if (at < wrote and context[at] != context[wrote] and self.held >= HELD_MIN
                    and context[at] not in self.controls):
                self.left = (at, wrote + 1)
            else:                               # the copy goes on (or there was none)
                self.left = None
        if self.left is not None and len(context) - self.left[1] >= EDIT_STEPS:
            self.left = None

    def resume(self, context: list[int]) -> int | None:
        """Where the source goes on past the edit, or None: right after leaving it, past the
        replaced token; later, past the first place within ``EDIT_AHEAD`` of it that holds
        the answer's last token."""
        if self.left is None:
            return None
        at, since = self.left
        if len(context) == since:
            start = at + 1
        else:
            ahead = before_control(context[at + 1:min(at + 1 + EDIT_AHEAD, since - 1)],
                                   self.controls)
            if context[-1] not in ahead:
                return None
            start = at + 2 + ahead.index(context[-1])
        return start if start < since - 1 else None
