"""A GBNF grammar read into rules, walked the way llama.cpp's grammar engine walks it, with
the shortest text that ends each of its positions.

``compile_gbnf`` reads the GBNF text (the dialect of llama.cpp's ``llama-grammar.cpp``:
literals, character classes, ``.``, rule references, groups, alternatives and the ``*``,
``+``, ``?``, ``{m}``, ``{m,}``, ``{m,n}`` repetitions, written out into rules as llama.cpp
writes them) into a ``Grammar``. A parse state is a set of stacks, as llama.cpp keeps it: a
stack is a tuple of positions in the flat element list, its last one the next element to
match; an empty stack means the text so far is a whole sentence of the grammar.
``Grammar.advance`` moves a state over a text, ``Grammar.closing`` gives the shortest text
that makes it whole. The shortest text of each rule is found by a fixpoint over rule lengths
(a character class gives one character of the class, a printable one where it has one).

Pure Python, no llama.cpp; ``tests/unit/test_call_closing.py`` checks it against llama.cpp's
own grammar engine (``tests/gbnf_check.py``).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

END, CHAR, REF = 0, 1, 2
#: A state: every stack the text so far may be on (empty: the grammar is dead).
State = frozenset
#: Characters a class gives for its shortest text, the first the class admits.
_PREFERRED = "0a1 x"


class GrammarError(ValueError):
    pass


# ------------------------------------------------------------------ reading GBNF

class _Reader:
    """Recursive descent over GBNF text into ``rules``: rule id -> alternatives, each a list
    of elements ``(CHAR, (ranges, negated))`` or ``(REF, rule id)``."""

    def __init__(self, text: str):
        self.src, self.pos = text, 0
        self.ids: dict[str, int] = {}
        self.rules: list[list[list[tuple]] | None] = []

    def rule_id(self, name: str) -> int:
        if name not in self.ids:
            self.ids[name] = len(self.rules)
            self.rules.append(None)
        return self.ids[name]

    def new_rule(self, alts: list[list[tuple]]) -> int:
        self.rules.append(alts)
        return len(self.rules) - 1

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.src[i] if i < len(self.src) else ""

    def space(self, newlines: bool) -> None:
        while self.pos < len(self.src):
            c = self.src[self.pos]
            if c == "#":
                while self.pos < len(self.src) and self.src[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            else:
                return

    def name(self) -> str:
        start = self.pos
        while self.peek() and (self.peek().isalnum() or self.peek() in "-_"):
            self.pos += 1
        if start == self.pos:
            raise GrammarError(f"expected a rule name at {self.pos}")
        return self.src[start:self.pos]

    def read(self) -> None:
        self.space(True)
        while self.pos < len(self.src):
            name = self.name()
            self.space(False)
            if not self.src.startswith("::=", self.pos):
                raise GrammarError(f"expected ::= after {name!r}")
            self.pos += 3
            self.space(True)
            rid = self.rule_id(name)
            if self.rules[rid] is not None:
                raise GrammarError(f"rule {name!r} defined twice")
            self.rules[rid] = self.alternatives(nested=False)
            if self.peek() not in ("", "\r", "\n"):
                raise GrammarError(f"unexpected {self.peek()!r} at {self.pos}")
            self.space(True)

    def alternatives(self, nested: bool) -> list[list[tuple]]:
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested: bool) -> list[tuple]:
        seq: list[tuple] = []
        last = 0                                    # where the last atom starts in seq
        while True:
            c = self.peek()
            if c == '"':
                self.pos += 1
                last = len(seq)
                while self.peek() != '"':
                    if not self.peek():
                        raise GrammarError("unterminated literal")
                    cp = self.char()
                    seq.append((CHAR, (((cp, cp),), False)))
                self.pos += 1
            elif c == "[":
                last = len(seq)
                seq.append((CHAR, self.char_class()))
            elif c == ".":
                self.pos += 1
                last = len(seq)
                seq.append((CHAR, ((), True)))
            elif c and (c.isalnum() or c in "-_"):
                last = len(seq)
                seq.append((REF, self.rule_id(self.name())))
            elif c == "(":
                self.pos += 1
                self.space(True)
                alts = self.alternatives(nested=True)
                if self.peek() != ")":
                    raise GrammarError(f"expected ) at {self.pos}")
                self.pos += 1
                last = len(seq)
                seq.append((REF, self.new_rule(alts)))
            elif c in ("*", "+", "?"):
                self.pos += 1
                self.repeat(seq, last, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[c])
            elif c == "{":
                self.repeat(seq, last, *self.bounds())
            else:
                return seq
            self.space(nested)

    def char(self) -> int:
        """One (possibly escaped) code point of a literal or a class."""
        c = self.src[self.pos]
        self.pos += 1
        if c != "\\":
            return ord(c)
        e = self.src[self.pos]
        self.pos += 1
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width:
            digits = self.src[self.pos:self.pos + width]
            self.pos += width
            try:
                return int(digits, 16)
            except ValueError:
                raise GrammarError(f"bad escape \\{e}{digits}") from None
        return ord({"n": "\n", "r": "\r", "t": "\t"}.get(e, e))

    def char_class(self) -> tuple:
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges = []
        while self.peek() != "]":
            if not self.peek():
                raise GrammarError("unterminated character class")
            lo = self.char()
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = self.char()
            ranges.append((lo, hi))
        self.pos += 1
        return tuple(ranges), negated

    def bounds(self) -> tuple[int, int | None]:
        end = self.src.find("}", self.pos)
        if end < 0:
            raise GrammarError("unterminated {m,n}")
        body = self.src[self.pos + 1:end].replace(" ", "")
        self.pos = end + 1
        lo, comma, hi = body.partition(",")
        try:
            low = int(lo)
            high = (int(hi) if hi else None) if comma else low
        except ValueError:
            raise GrammarError(f"bad repetition {{{body}}}") from None
        return low, high

    def repeat(self, seq: list[tuple], last: int, low: int, high: int | None) -> None:
        """The atom ``seq[last:]`` repeated ``low`` to ``high`` (None: unbounded) times."""
        atom = seq[last:]
        if not atom:
            raise GrammarError("a repetition with nothing before it")
        del seq[last:]
        seq.extend(atom * low)
        if high is None:
            rid = self.new_rule([])
            self.rules[rid] = [atom + [(REF, rid)], []]
            seq.append((REF, rid))
            return
        inner: int | None = None                   # (atom (atom (atom)?)?)?
        for _ in range(high - low):
            inner = self.new_rule([atom + ([(REF, inner)] if inner is not None else []), []])
        if inner is not None:
            seq.append((REF, inner))


# ------------------------------------------------------------------ the grammar

@functools.lru_cache(maxsize=1024)
def _pick(ranges: tuple, negated: bool) -> str:
    """The character a class gives for its shortest text: a preferred one it admits, else
    a printable ASCII one, else its lowest."""
    if not negated and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return chr(ranges[0][0])                  # a literal's character

    def admits(cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in ranges) != negated
    for ch in _PREFERRED + "".join(map(chr, range(0x21, 0x7F))):
        if admits(ord(ch)):
            return ch
    if not negated:
        return chr(ranges[0][0])
    cp = 0x80
    while not admits(cp):
        cp += 1
    return chr(cp)


@dataclass(frozen=True, eq=False)
class Grammar:
    """A compiled grammar: ``kind``/``data`` the flat element list (each alternative's
    elements then an END), ``alts`` each rule's alternative offsets, ``tail``/``tail_bytes``
    the shortest text (and its UTF-8 length) from each offset to its alternative's end
    (None where no finite text ends it), ``start`` the state before any text."""
    kind: tuple
    data: tuple
    alts: tuple
    tail: tuple
    tail_bytes: tuple
    start: State

    def advance(self, state: State, text: str) -> State:
        """The state after ``text``; empty when the grammar refuses it."""
        for ch in text:
            if not state:
                break
            state = self._step(state, ord(ch))
        return state

    def _step(self, state: State, cp: int) -> State:
        kind, data = self.kind, self.data
        out: set = set()
        for stack in state:
            if not stack:
                continue
            top = stack[-1]
            ranges, negated = data[top]
            if any(lo <= cp <= hi for lo, hi in ranges) != negated:
                rest = stack[:-1] if kind[top + 1] == END else stack[:-1] + (top + 1,)
                self._expand(rest, out)
        return frozenset(out)

    def _expand(self, stack: tuple, out: set) -> None:
        """Add to ``out`` every stack ``stack`` leads to whose top is a character (or
        which is empty), going into rule references (llama.cpp's ``advance_stack``)."""
        if not stack or self.kind[stack[-1]] == CHAR:
            out.add(stack)
            return
        top = stack[-1]
        rest = stack[:-1] if self.kind[top + 1] == END else stack[:-1] + (top + 1,)
        for start in self.alts[self.data[top]]:
            self._expand(rest if self.kind[start] == END else rest + (start,), out)

    def complete(self, state: State) -> bool:
        """The text so far is a whole sentence (it may also go on)."""
        return () in state

    def closing_bytes(self, state: State) -> int | None:
        """UTF-8 length of ``closing(state)`` (None when nothing closes it)."""
        best = None
        for stack in state:
            lengths = [self.tail_bytes[p] for p in stack]
            if None not in lengths and (best is None or sum(lengths) < best):
                best = sum(lengths)
        return best

    def closing(self, state: State) -> str | None:
        """The shortest text after which the grammar is whole ("" when it already is);
        None when the state is dead or no finite text closes it."""
        best = None
        for stack in state:
            parts = [self.tail[p] for p in reversed(stack)]
            if None in parts:
                continue
            text = "".join(parts)
            if best is None or (len(text), text) < (len(best), best):
                best = text
        return best


@functools.lru_cache(maxsize=64)
def compile_gbnf(text: str, root: str = "root") -> Grammar:
    """``text`` (GBNF) compiled for walking from rule ``root``. Raises GrammarError for text
    llama.cpp would refuse (an undefined rule, bad syntax). Cached: the grammar of the same
    forced call is read once."""
    reader = _Reader(text)
    reader.read()
    undefined = [n for n, i in reader.ids.items() if reader.rules[i] is None]
    if undefined:
        raise GrammarError(f"undefined rules: {', '.join(undefined)}")
    if root not in reader.ids:
        raise GrammarError(f"no rule {root!r}")
    rules = [alternatives or [] for alternatives in reader.rules]     # every one defined
    shortest = _shortest(rules)
    kind: list[int] = []
    data: list = []
    tail: list[str | None] = []
    alts = []
    for alternatives in rules:
        offsets = []
        for alt in alternatives:
            offsets.append(len(kind))
            texts = [_pick(*d) if k == CHAR else shortest[d] for k, d in alt]
            for j, (k, d) in enumerate(alt):
                kind.append(k)
                data.append(d)
                rest = [t for t in texts[j:] if t is not None]
                tail.append("".join(rest) if len(rest) == len(alt) - j else None)
            kind.append(END)
            data.append(None)
            tail.append("")
        alts.append(tuple(offsets))
    g = Grammar(tuple(kind), tuple(data), tuple(alts), tuple(tail),
                tuple(None if t is None else len(t.encode()) for t in tail), frozenset())
    out: set = set()
    for start in alts[reader.ids[root]]:
        g._expand(() if kind[start] == END else (start,), out)
    return dataclasses.replace(g, start=frozenset(out))


def _shortest(rules: list[list[list[tuple]]]) -> list[str | None]:
    """Each rule's shortest text (None: no finite one), by a fixpoint over lengths."""
    best: list[str | None] = [None] * len(rules)
    changed = True
    while changed:
        changed = False
        for rid, alternatives in enumerate(rules):
            for alt in alternatives:
                parts = [_pick(*d) if k == CHAR else best[d] for k, d in alt]
                known = [p for p in parts if p is not None]
                if len(known) < len(parts):
                    continue
                text, now = "".join(known), best[rid]
                if now is None or len(text) < len(now):
                    best[rid] = text
                    changed = True
    return best
