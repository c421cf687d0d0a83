"""``hypnos chat``: an interactive chat in the terminal with a model of a running server
(cli/chat/ holds the parts)."""
from __future__ import annotations

import click

from hypnos.cli.client import server_options
from hypnos.cli.common import complete_model_ids, console


@click.command()
@click.argument("model", required=False, shell_complete=complete_model_ids)
@server_options
@click.option("--system", "system", default="", metavar="TEXT",
              help="System prompt to start with (/system changes it).")
@click.option("--think/--no-think", "think", default=None,
              help="Turn the model's thinking on or off (default: the server's; /think "
              "changes it). Models without a thinking format ignore it.")
@click.option("--max-tokens", type=click.IntRange(1), default=None,
              help="Longest answer in tokens, thoughts included (default: the server's).")
def chat(model: str | None, client, system: str, think: bool | None,
         max_tokens: int | None) -> None:
    """Chat with MODEL (default: a chat model already in tier 1, else the first) of the
    server at --url. Answers stream in as Markdown; a thinking model's thoughts show dimmed,
    then fold to one line. After each answer a footer gives tokens/s, the prompt tokens the
    cache served and any tier move the answer cost.

    Type a message and Enter; end a line with \\ to continue it, or put \"\"\" on a line of
    its own to open and close a block. Commands: /model [ID], /system [TEXT], /think
    on|off|show, /file PATH (an image for a vision model, audio to transcribe, a PDF or DOCX
    to convert), /clear, /tier, /help, /bye (or Ctrl-D). Ctrl-C stops an answer.

    Exits 0 on /bye or Ctrl-D, 1 when the server refuses (the message says which setting
    to change), 3 when no server answers (it prints the `hypnos serve` command)."""
    from hypnos.cli.chat import api
    from hypnos.cli.chat.loop import ChatLoop
    from hypnos.cli.chat.session import Session
    out = console()
    try:
        status = client.get("/v1/memory/status", timeout=30)
    except click.ClickException as exc:
        hint = api.advice(exc, client.base)
        if hint:
            out.print(hint, markup=False, highlight=False)
        raise
    ids = [m["id"] for m in api.chat_models(status)]
    if model is None:
        model = api.default_model(status)
        if model is None:
            raise click.ClickException(f"the server at {client.base} serves no chat model")
    elif model not in ids:
        raise click.BadParameter(f"no chat model {model!r} at {client.base}; it has: "
                                 + (", ".join(ids) or "none"), param_hint="MODEL")
    try:
        import readline  # noqa: F401  (line editing and the input history for input())
    except ImportError:
        pass
    session = Session(model, system=system, think=think, max_tokens=max_tokens)
    raise SystemExit(ChatLoop(client, session, out).run())
