"""Reading a chat answer as it streams: stop strings, then thinking / content / tool calls.

``StopMatcher`` cuts the text at the first stop string and holds back a tail that could be
the start of one, so no partial stop text ever reaches a delta. ``AnswerSplitter`` sorts the
remaining text into reasoning (inside the thinking block), content and tool calls, holding
back any tail that could be the start of a delimiter, so delimiters never leak either.
Both are pure and fed piece by piece from the engine's caller thread.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hypnos.engines.chat_format.prepare import ThinkDialect
from hypnos.engines.chat_format.dialects import CallParseError, ToolDialect
from hypnos.engines.chat_format.loose_calls import may_be_loose, read_loose
from hypnos.engines.records import ToolCall, ToolCallError


def _partial_tail(text: str, markers) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


class StopMatcher:
    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.buf = ""
        self.hit = False
        self.matched: str | None = None      # the stop string that ended the answer

    def feed(self, text: str) -> str:
        """The text that is certainly before any stop string. After a hit, ``hit`` is True
        and nothing more is returned."""
        if self.hit:
            return ""
        if not self.stops:
            return text
        self.buf += text
        found = [(i, s) for s in self.stops if (i := self.buf.find(s)) >= 0]
        cut = min(found)[0] if found else -1
        if cut >= 0:
            self.hit = True
            self.matched = min(found)[1]
            out, self.buf = self.buf[:cut], ""
            return out
        keep = _partial_tail(self.buf, self.stops)
        out = self.buf[:len(self.buf) - keep]
        self.buf = self.buf[len(self.buf) - keep:]
        return out

    def flush(self) -> str:
        out, self.buf = ("" if self.hit else self.buf), ""
        return out


@dataclass
class Piece:
    kind: str                            # reasoning | content | call
    text: str = ""
    call: ToolCall | None = None


class ModeReader:
    """A reader that runs its current mode (``_<mode>(out)``) over the held-back text until
    neither the mode nor the text changes: the modes consume what they can and switch."""
    buf: str
    mode: str

    def feed(self, text: str) -> list[Piece]:
        self.buf += text
        out: list[Piece] = []
        while True:
            before = (self.mode, len(self.buf))
            getattr(self, "_" + self.mode)(out)
            if (self.mode, len(self.buf)) == before:
                return out


@dataclass
class AnswerSplitter(ModeReader):
    """``think``: the thinking dialect, ``in_think``: the prompt already opened the block;
    ``tools``: the dialect when tool calls are active; ``prefix``: text the server wrote
    after the generation prompt (a forced call's opening), read as the answer's start.

    ``forced``: the answer is a forced call under the dialect's grammar, so all of it (the
    prefix and everything generated) is read as the call at the end, with no opener search:
    whatever the grammar admits is a call, however the model spaced it.

    Loose calls (``loose_calls``): with tools active and the call not forced, an answer
    whose content starts (after whitespace and thinking) with ``{``, ``[`` or a fence is
    held back while it may still be JSON calls of the offered tools; at the end it is
    those calls, or, when it is not, read as if it had never been held (the dialect's own
    call search included). Any other answer streams with no added delay."""
    think: ThinkDialect | None = None
    in_think: bool = False
    tools: ToolDialect | None = None
    prefix: str = ""
    known: frozenset[str] = frozenset()           # the offered tools' names
    offered: list[dict] | None = None             # the offered tools (types bare values)
    forced: bool = False
    errors: list[ToolCallError] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def __post_init__(self):
        self.buf = ""
        self.mode = "think" if self.in_think else ("maybe_think" if self.think else "content")
        self.strip_next = False
        self.strip_reasoning = True          # the newline after the opening delimiter
        self.call_buf = ""
        # Whether the answer may still be loose calls: until its first non-blank content.
        self.loose = self.tools is not None and not self.forced and bool(self.offered)
        self.held = ""
        if self.forced and self.tools is not None:
            self.mode, self.call_buf = "forced", self.prefix
        elif self.prefix and self.tools is not None and any(
                self.prefix.startswith(o) for o in self.tools.openers):
            self.mode, self.call_buf = "call", self.prefix
        if self.mode in ("forced", "call"):
            self.loose = False                      # the answer starts with a call

    def finish(self) -> list[Piece]:
        """Everything still held back, at the end of the answer."""
        out: list[Piece] = []
        if self.mode == "held":
            self._settle(out)
        if self.mode == "maybe_think":
            self.mode = "content"
        if self.mode == "think":
            if self.buf:
                out.append(Piece("reasoning", self.buf))
        elif self.mode == "content":
            text = self.buf.lstrip() if self.strip_next else self.buf
            if text:
                out.append(Piece("content", text))
        elif self.mode in ("call", "forced"):
            self.call_buf += self.buf
            self._parse_block(self.call_buf, out)
        self.buf = self.call_buf = ""
        return out

    # --------------------------------------------------------------- modes

    def _maybe_think(self, out):
        head = self.buf.lstrip()
        if head.startswith(self.think.open):
            self.buf = head[len(self.think.open):]
            self.mode = "think"
        elif head and not self.think.open.startswith(head):
            self.mode = "content"
            self.strip_next = True

    def _think(self, out):
        if self.strip_reasoning:
            self.buf = self.buf.lstrip()
            if not self.buf:
                return
            self.strip_reasoning = False
        close = self.think.close
        at = self.buf.find(close)
        if at >= 0:
            if at:
                out.append(Piece("reasoning", self.buf[:at]))
            self.buf = self.buf[at + len(close):]
            self.mode = "content"
            self.strip_next = True
            return
        keep = _partial_tail(self.buf, [close])
        if len(self.buf) > keep:
            out.append(Piece("reasoning", self.buf[:len(self.buf) - keep]))
            self.buf = self.buf[len(self.buf) - keep:]

    def _content(self, out):
        if self.strip_next:
            self.buf = self.buf.lstrip()
            if not self.buf:
                return
            self.strip_next = False
        if self.loose:
            head = self.buf.lstrip()
            if not head:
                return                              # blank so far: the start is unknown
            self.loose = False
            if head[0] in "{[`" and may_be_loose(self.buf, self.offered):
                self.mode = "held"
                return
        openers = self.tools.openers if self.tools is not None else ()
        hits = [i for i in (self.buf.find(o) for o in openers) if i >= 0]
        if hits:
            at = min(hits)
            if self.buf[:at].strip():
                out.append(Piece("content", self.buf[:at]))
            self.call_buf, self.buf = self.buf[at:], ""
            self.mode = "call"
            return
        keep = _partial_tail(self.buf, openers)
        if len(self.buf) > keep:
            out.append(Piece("content", self.buf[:len(self.buf) - keep]))
            self.buf = self.buf[len(self.buf) - keep:]

    def _held(self, out):
        self.held += self.buf
        self.buf = ""
        if not may_be_loose(self.held, self.offered):
            self._release()

    def _release(self):
        """Back to reading the held text as content (``loose`` is off by now)."""
        self.buf, self.held = self.held + self.buf, ""
        self.mode = "content"

    def _settle(self, out: list[Piece]):
        """At the end of a held answer: its loose calls, or it read as content."""
        calls = read_loose(self.held + self.buf, self.offered)
        if calls is None:
            self._release()
            out.extend(self.feed(""))
            return
        self.held = self.buf = ""
        self.mode = "content"
        self.calls.extend(calls)
        out.extend(Piece("call", call=call) for call in calls)

    def _forced(self, out):
        self.call_buf += self.buf          # read whole at the end (``finish``)
        self.buf = ""

    def _call(self, out):
        self.call_buf += self.buf
        self.buf = ""
        close = self.tools.close
        if not close:
            return                                   # the call runs to the end
        at = self.call_buf.find(close)
        if at < 0:
            return
        block, rest = self.call_buf[:at + len(close)], self.call_buf[at + len(close):]
        self._parse_block(block, out)
        self.call_buf, self.buf = "", rest
        self.mode = "content"
        self.strip_next = True

    def _parse_block(self, block: str, out: list[Piece]):
        read_calls(self.tools, block, self.offered, self.known, self.calls, self.errors, out)


def read_calls(dialect: ToolDialect, block: str, offered: list[dict] | None,
               known: frozenset[str], calls: list[ToolCall], errors: list[ToolCallError],
               out: list[Piece]) -> None:
    """Parse one call block: each call of an offered tool goes to ``calls`` and ``out``; a
    block that does not parse, or a call to a tool not offered, goes to ``errors``."""
    try:
        parsed = dialect.parse(block, offered)
    except CallParseError as exc:
        errors.append(ToolCallError("unparseable_call", f"{exc}: {block[:200]!r}"))
        return
    for call in parsed:
        if known and call.name not in known:
            errors.append(ToolCallError(
                "unknown_function", f"the model called {call.name!r}, which is not in tools",
                function=call.name))
            continue
        calls.append(call)
        out.append(Piece("call", call=call))
