"""Typed lines into chat input: slash commands and multi-line messages. Pure: no I/O beyond
the ``read`` callable the caller passes.

Multi-line input: a line ending in a backslash continues on the next line (the backslash is
dropped), and a line that is exactly three double quotes opens a block closed by the next
such line (the lines between are the message, verbatim). Both work with plain ``input()``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# name -> (argument synopsis, one-line help); /help prints them in this order.
COMMANDS: dict[str, tuple[str, str]] = {
    "model": ("[ID]", "switch to model ID; without ID list the chat models"),
    "system": ("[TEXT]", "set the system prompt (empty: remove it); clears the history"),
    "think": ("on|off|show", "thinking on or off (models that think); show the last thoughts"),
    "file": ("PATH", "attach an image (vision models), audio (transcribed) or a PDF/DOCX "
                     "(converted to Markdown) to the next message"),
    "clear": ("", "forget the conversation (the system prompt stays)"),
    "tier": ("", "where each model is now: the server's memory tiers"),
    "help": ("", "this list"),
    "bye": ("", "leave (Ctrl-D too)"),
}
ALIASES = {"exit": "bye", "quit": "bye", "?": "help", "models": "model"}
BLOCK = '"""'


class CommandError(ValueError):
    """A slash command that cannot run as typed; the message says what to type instead."""


@dataclass(frozen=True)
class Command:
    name: str          # a key of COMMANDS
    arg: str = ""      # the rest of the line, stripped


@dataclass(frozen=True)
class Message:
    text: str


def parse(text: str) -> Command | Message | None:
    """One complete input: a slash command, a message, or None for blank input. A line
    starting with ``//`` is a message starting with ``/``. Raises CommandError for an
    unknown command or a bad argument."""
    if not text.strip():
        return None
    stripped = text.strip()
    if stripped.startswith("//"):
        return Message(stripped[1:])
    if not stripped.startswith("/") or "\n" in stripped:
        return Message(text.strip("\n"))
    word, _, arg = stripped[1:].partition(" ")
    name = ALIASES.get(word.lower(), word.lower())
    if name not in COMMANDS:
        raise CommandError(f"unknown command /{word}: /help lists them "
                           "(start a message with // to send a slash)")
    arg = arg.strip()
    if name == "think" and arg.lower() not in ("on", "off", "show"):
        raise CommandError("/think takes on, off or show")
    if name == "file" and not arg:
        raise CommandError("/file needs a path: /file PATH")
    if name in ("clear", "tier", "help", "bye") and arg:
        raise CommandError(f"/{name} takes no argument")
    if name == "think":
        arg = arg.lower()
    if name == "file" and len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "'\"":
        arg = arg[1:-1]
    return Command(name, arg)


def read_input(read: Callable[[str], str], prompt: str, more: str) -> str:
    """Read one input, asking ``read(prompt)`` for the first line and ``read(more)`` for the
    ones after it: continued lines (trailing backslash) and triple-quote blocks are joined
    with newlines. EOFError from ``read`` on the first line propagates (the user left); in
    the middle of a block it ends the block."""
    first = read(prompt)
    if first.strip() == BLOCK:
        lines: list[str] = []
        while True:
            try:
                line = read(more)
            except EOFError:
                break
            if line.strip() == BLOCK:
                break
            lines.append(line)
        return "\n".join(lines)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        try:
            lines.append(read(more))
        except EOFError:
            break
    return "\n".join(lines)


def help_lines() -> list[str]:
    width = max(len(f"/{n} {a}".rstrip()) for n, (a, _) in COMMANDS.items())
    out = [f"{f'/{n} {a}'.rstrip():<{width}}  {h}" for n, (a, h) in COMMANDS.items()]
    out.append('End a line with \\ to continue it; """ on its own line opens and closes '
               "a block.")
    return out
