"""The index prompt lookup searches (``NgramIndex``: every n-gram of a growing token list,
and every single token, with the places right after their latest occurrences) and the rule
that cuts a draft where its places disagree (``agreed``), and the cut at a message's end
(``before_control``). Used by ``drafts.NgramDrafter`` over
the context and by ``drafts.AnswerPool`` over a partition's recent answers. Pure.
"""
from __future__ import annotations

#: Prompt lookup drafts only where the context's last ``MATCH_MIN`` tokens occurred before.
#: A short match is a guess on free text ("of the" is followed by anything), a long one is
#: a copy in progress (code being returned, a quote): measured on Qwen2.5-Coder-1.5B's greedy
#: answers, a 5-token floor keeps free text at the speed of no drafting while code edits
#: still draft nearly every copied token (``bench/speculative.py``).
MATCH_MIN = 5
#: How far back a match is measured (a longer one drafts no more than this says).
MATCH_CAP = 64
#: Earlier places of one ``MATCH_MIN``-gram compared (the latest ones).
CANDIDATES = 8
#: A gapped match (``NgramIndex.gapped_matches``): at least this many tokens agree before
#: the value, and a value is at most ``GAP_MAX`` tokens long on either side.
ANCHOR_MIN, GAP_MAX = 3, 3


class NgramIndex:
    """Every ``n``-gram of a growing token list, with the positions right after its latest
    ``CANDIDATES`` occurrences that have a continuation, and the same for every single token
    (``gapped_matches``). Appending is O(tokens added)."""

    def __init__(self, n: int = MATCH_MIN):
        self.n = n
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = {}
        self.after: dict[int, list[int]] = {}       # token -> positions right after it
        self.indexed = 0           # n-grams ending before this position are in ``ends``

    def sync(self, tokens: list[int]) -> None:
        """Index ``tokens``: extends in place when it extends what was indexed, else rebuilds.
        Called every decode step with the whole context, so an extension is recognised by
        its length and its ends (O(1), not a compare of the whole list): a context that
        differed inside but matched there would only give worse drafts, never wrong tokens
        (the target checks every one)."""
        old = self.tokens
        if (len(tokens) < len(old)
                or (old and (tokens[0] != old[0] or tokens[len(old) - 1] != old[-1]))):
            self.ends.clear()
            self.after.clear()
            self.indexed = 0
            old = self.tokens = []
        old.extend(tokens[len(old):])
        self._index_new()

    def _index_new(self) -> None:
        n, toks = self.n, self.tokens
        # The n-gram ending at e (exclusive) is indexed once tokens[e] exists.
        for e in range(max(self.indexed, n), len(toks)):
            places = self.ends.setdefault(tuple(toks[e - n:e]), [])
            places.append(e)
            if len(places) > CANDIDATES:
                del places[0]
        for e in range(max(self.indexed, 1), len(toks)):
            places = self.after.setdefault(toks[e - 1], [])
            places.append(e)
            if len(places) > CANDIDATES:
                del places[0]
        self.indexed = max(self.indexed, len(toks))

    def longest_match(self, query: list[int] | None = None,
                      cap: int = MATCH_CAP) -> tuple[int, int]:
        """(match length, continuation start) of ``query``'s suffix (by default the indexed
        list's own) at the indexed place where the most tokens agree backwards (at least
        ``n``; the latest on a tie), or (0, -1) when its last ``n`` tokens are not there."""
        m, starts = self.matches(query, cap)
        return (m, starts[0]) if starts else (0, -1)

    def matches(self, query: list[int] | None = None,
                cap: int = MATCH_CAP) -> tuple[int, list[int]]:
        """``longest_match`` with every place of that length: (length, continuation starts,
        the latest first)."""
        toks = self.tokens
        query = toks if query is None else query
        size = len(query)
        best, starts = 0, []
        if size < self.n:
            return best, starts
        for e in reversed(self.ends.get(tuple(query[size - self.n:]), ())):
            m = self.n
            while m < cap and e - 1 - m >= 0 and toks[e - 1 - m] == query[size - 1 - m]:
                m += 1
            if m > best:
                best, starts = m, [e]
            elif m == best:
                starts.append(e)
        return best, starts

    def gapped_matches(self, cap: int = MATCH_CAP) -> tuple[int, list[int]]:
        """(anchor length, continuation starts, the latest first) where the indexed list's
        end recurs with another value in it: its last token, after a value of 1 to
        ``GAP_MAX`` tokens, after an anchor of at least ``ANCHOR_MIN`` tokens, matches an
        earlier place with a value of 1 to ``GAP_MAX`` tokens of its own. That is structured
        output from prose: in ``"city": "Lagos",`` then ``"city": "Krakow",`` the key is the
        anchor, the city the value, and what followed the first ``",`` (the next key) is the
        draft, where an exact match never reaches ``MATCH_MIN`` tokens (the values may also be
        equal: a short exact match). Only the longest anchor's places; (0, []) when there is
        none."""
        toks = self.tokens
        last = len(toks) - 1
        best, starts = 0, []
        for e in reversed(self.after.get(toks[last], ()) if last >= 0 else ()):
            m = max((self._anchor(last - 1 - g, e - 2 - h, cap)
                     for g in range(1, GAP_MAX + 1) for h in range(1, GAP_MAX + 1)), default=0)
            if m > best:
                best, starts = m, [e]
            elif m == best and m:
                starts.append(e)
        return (best, starts) if best >= ANCHOR_MIN else (0, [])

    def _anchor(self, a: int, b: int, cap: int) -> int:
        """How many tokens agree backwards from positions ``a`` and ``b``."""
        toks = self.tokens
        m = 0
        while m < cap and a - m >= 0 and b - m >= 0 and toks[a - m] == toks[b - m]:
            m += 1
        return m


def before_control(tokens: list[int], controls: frozenset[int]) -> list[int]:
    """``tokens`` up to the first of ``controls`` (the chat template's message markers):
    a copy of a message ends where the message did."""
    for i, token in enumerate(tokens):
        if token in controls:
            return tokens[:i]
    return tokens


def agreed(tokens: list[int], starts: list[int], size: int) -> list[int]:
    """What follows ``starts[0]`` in ``tokens`` (``size`` tokens at most), cut where what
    follows another of ``starts`` differs: where a match recurs, the draft is only what every
    place agrees on. In structured output the key after a value is drafted (every record
    has it) and the value after a key is not (each record has its own)."""
    draft = tokens[starts[0]:starts[0] + size]
    for s in starts[1:]:
        other = tokens[s:s + len(draft)]
        n = 0
        while n < len(other) and draft[n] == other[n]:
            n += 1
        draft = draft[:n]
    return draft
