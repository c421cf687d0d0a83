"""OpenAI's harmony format (gpt-oss): every answer is a run of messages, each a header and a
body, ``<|start|>assistant<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>
BODY<|end|>``. The ``analysis`` channel is the reasoning, ``final`` the answer, and a
``commentary`` message addressed ``to=functions.NAME`` is a tool call whose body is the JSON
arguments (ended by ``<|call|>``).

``<|end|>``, ``<|return|>`` and ``<|call|>`` are control tokens: llama.cpp renders them as
nothing, so a body also ends where the next header starts (``<|start|>`` or ``<|channel|>``,
which it always renders). ``HarmonySplitter`` reads the stream into the same pieces
(reasoning, content, calls) as ``stream.AnswerSplitter`` does for the other families, holding
back any tail that could be the start of a marker. ``markup_dialects.HarmonyDialect`` is
the tool dialect: a forced call is the header ``<|channel|>commentary to=functions.NAME
<|constrain|>json<|message|>`` then the arguments under the tool's JSON schema.

Pure string work (no llama.cpp, but the grammar uses its JSON-schema converter); tested on the
published gpt-oss template and sample answers (``tests/unit/test_harmony.py``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from hypnos.engines.chat_format.dialects import ToolDialect
from hypnos.engines.chat_format.markup_dialects import (_RECIPIENT, ENDS, MESSAGE,
                                                        harmony_template)
from hypnos.engines.chat_format.stream import ModeReader, Piece, _partial_tail, read_calls
from hypnos.engines.records import ToolCall, ToolCallError

__all__ = ["HarmonySplitter", "harmony_template"]
#: Where a body ends besides ENDS: the next header's start (always rendered).
STARTS = ("<|start|>", "<|channel|>")
#: A header longer than this without <|message|> is not harmony: the rest is plain content.
MAX_HEADER = 256
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")


@dataclass
class HarmonySplitter(ModeReader):
    """The answer's messages as pieces. ``tools``: the dialect when tool calls are active
    (else a call is read as content); ``prefix``: text the server wrote after the generation
    prompt (a forced call's header), read as the answer's start."""
    tools: ToolDialect | None = None
    prefix: str = ""
    known: frozenset[str] = frozenset()
    offered: list[dict] | None = None
    forced: bool = False
    errors: list[ToolCallError] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def __post_init__(self):
        self.buf = self.prefix
        self.mode = "header"
        self.kind = "content"
        self.block = ""                    # a call's header and body, parsed at its end
        self.fresh = False                 # strip the first content's leading space

    def finish(self) -> list[Piece]:
        out: list[Piece] = []
        if self.mode == "body":
            self._emit(self.buf, out)
            self._end_message(out)
        elif (self.mode == "plain" or (self.mode == "header" and not _framing(self.buf))) \
                and self.buf.strip():
            out.append(Piece("content", self.buf))
        self.buf = ""
        return out

    # --------------------------------------------------------------- modes

    def _header(self, out):
        at = self.buf.find(MESSAGE)
        if at < 0:
            if len(self.buf) > MAX_HEADER or not _framing(self.buf):
                self.mode = "plain"
            return
        head, self.buf = self.buf[:at], self.buf[at + len(MESSAGE):]
        recipient = _RECIPIENT.search(head)
        channel = _CHANNEL.search(head)
        if recipient is not None and self.tools is not None:
            self.kind, self.block = "call", head + MESSAGE
        elif channel is not None and channel.group(1) == "analysis":
            self.kind = "reasoning"
        else:
            self.kind, self.fresh = "content", True
        self.mode = "body"

    def _body(self, out):
        hits = [(i, m) for m in ENDS + STARTS if (i := self.buf.find(m)) >= 0]
        if hits:
            at, marker = min(hits)
            self._emit(self.buf[:at], out)
            self.buf = self.buf[at + (len(marker) if marker in ENDS else 0):]
            self._end_message(out)
            return
        keep = _partial_tail(self.buf, ENDS + STARTS)
        self._emit(self.buf[:len(self.buf) - keep], out)
        self.buf = self.buf[len(self.buf) - keep:]

    def _plain(self, out):
        if self.buf:
            out.append(Piece("content", self.buf))
            self.buf = ""

    # --------------------------------------------------------------- pieces

    def _emit(self, text: str, out: list[Piece]):
        if self.kind == "call":
            self.block += text
            return
        if self.fresh:
            text = text.lstrip()
            self.fresh = not text
        if text:
            out.append(Piece(self.kind, text))

    def _end_message(self, out: list[Piece]):
        if self.kind == "call":
            read_calls(self.tools, self.block, self.offered, self.known, self.calls,
                       self.errors, out)
            self.block = ""
        self.mode, self.kind = "header", "content"


def _framing(text: str) -> bool:
    """``text`` (a header so far) can still be harmony framing: it starts with a marker or
    with a prefix of one."""
    head = text.lstrip()
    return not head or any(head.startswith(m) or m.startswith(head) for m in STARTS)
