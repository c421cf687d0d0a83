"""The ``hypnos chat`` loop: read an input, run its command or send it as a message, show
the answer as it streams. Blocks on the terminal and on the server; Ctrl-C stops an answer
(the connection is closed, which cancels it) or drops the line being typed; Ctrl-D leaves.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from hypnos.cli.chat import api, view
from hypnos.cli.chat.attach import AttachError, attach
from hypnos.cli.chat.commands import Command, CommandError, Message, help_lines, parse, read_input
from hypnos.cli.chat.session import Session
from hypnos.cli.client import Client

PROMPT, MORE = "> ", ". "
REDRAW_SECS = 0.05      # the Markdown is parsed again at most this often while it streams


class ChatLoop:
    def __init__(self, client: Client, session: Session, out: Console,
                 read: Callable[[str], str] = input):
        self.client, self.session, self.out, self.read = client, session, out, read

    # ------------------------------------------------------------------ helpers

    def status(self) -> dict:
        return self.client.get("/v1/memory/status", timeout=30)

    def note(self, text: str, style: str = "dim") -> None:
        self.out.print(Text(text, style=style))

    def error(self, exc: Exception) -> None:
        message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
        self.out.print(Text("error: ", style="bold red") + Text(message))
        hint = api.advice(exc, self.client.base) if isinstance(exc, click.ClickException) \
            else None
        if hint:
            self.out.print(Text(hint, style="yellow"))

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Until /bye or Ctrl-D; the exit status (0)."""
        self.note(f"hypnos chat with {self.session.model} at {self.client.base}; "
                  "/help lists the commands, /bye or Ctrl-D leaves")
        while True:
            try:
                text = read_input(self.read, PROMPT, MORE)
            except EOFError:
                self.out.print()
                return 0
            except KeyboardInterrupt:
                self.out.print()
                continue
            try:
                item = parse(text)
            except CommandError as exc:
                self.error(exc)
                continue
            if isinstance(item, Message):
                self.turn(item.text)
            elif isinstance(item, Command):
                if item.name == "bye":
                    return 0
                try:
                    self.command(item)
                except (click.ClickException, AttachError, CommandError) as exc:
                    self.error(exc)

    def command(self, cmd: Command) -> None:
        s = self.session
        if cmd.name == "help":
            for line in help_lines():
                self.out.print(Text(line))
        elif cmd.name == "clear":
            s.clear()
            self.note("conversation cleared")
        elif cmd.name == "system":
            s.system = cmd.arg
            self.note("system prompt set" if cmd.arg else "system prompt removed")
        elif cmd.name == "think":
            self.think(cmd.arg)
        elif cmd.name == "model":
            self.model(cmd.arg)
        elif cmd.name == "tier":
            self.out.print(view.tiers_table(self.status()))
            self.note("(hypnos tier draws the whole picture)")
        elif cmd.name == "file":
            self.file(Path(cmd.arg))

    def think(self, arg: str) -> None:
        if arg == "show":
            self.out.print(view.thoughts(self.session.last_thinking))
            return
        self.session.think = arg == "on"
        self.note(f"thinking {arg} (models without a thinking format ignore it)")

    def model(self, wanted: str) -> None:
        status = self.status()
        if not wanted:
            self.out.print(view.models_table(status, self.session.model))
            return
        ids = [m["id"] for m in api.chat_models(status)]
        if wanted not in ids:
            raise CommandError(f"no chat model {wanted!r} on this server; it has: "
                               + ", ".join(ids))
        self.session.model = wanted
        tier = next(m.get("current_tier", "") for m in status["models"] if m["id"] == wanted)
        self.note(f"now chatting with {wanted} ({view.TIERS.get(tier, tier)}); "
                  "the conversation goes on")

    def file(self, path: Path) -> None:
        a = attach(self.client, self.status(), self.session.model, path)
        self.session.pending.append(a)
        if a.kind == "image":
            what = "image"
        elif a.kind == "audio":
            what = f"transcript, {len(a.text or '')} characters: {_clip(a.text or '', 200)}"
        else:
            what = f"Markdown, {len(a.text or '')} characters"
        self.note(f"attached {a.name} ({what}); it goes with your next message")

    # ------------------------------------------------------------------ one turn

    def turn(self, text: str) -> None:
        """Send ``text`` (with the waiting attachments), stream the answer, print the
        footer. A refusal leaves the history as it was; Ctrl-C keeps what came."""
        s = self.session
        user = s.user_message(text)
        answer = view.AnswerView()
        started = time.perf_counter()
        finish: api.Finish | None = None
        events = api.stream_chat(self.client, s.request(user))
        live = None
        try:
            if self.out.is_terminal:
                from rich.live import Live
                live = Live(answer.renderable(), console=self.out, refresh_per_second=10)
                live.start()
            rows, shown = self.out.height - 1, 0.0
            for ev in events:
                if isinstance(ev, api.Delta):
                    now = time.perf_counter()
                    answer.add(ev.content, ev.reasoning, now - started)
                    if live is not None and now - shown >= REDRAW_SECS:
                        live.update(view.Tail(answer.renderable(), rows))
                        shown = now
                else:
                    finish = ev
        except KeyboardInterrupt:
            pass
        except click.ClickException as exc:
            if live is not None:
                live.stop()
                live = None
            self.error(exc)
            return
        finally:
            events.close()
            answer.done = True
            if live is not None:       # stopping prints the whole answer once
                live.update(answer.renderable())
                live.stop()
        if not self.out.is_terminal:
            self.out.print(answer.renderable())
        s.record(user, answer.content, answer.thinking)
        if finish is None:
            self.note("(stopped)")
            return
        line = view.footer(finish.usage, finish.telemetry, time.perf_counter() - started)
        if finish.reason == "length":
            line += " (cut at max_tokens)"
        self.note(line)


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."
