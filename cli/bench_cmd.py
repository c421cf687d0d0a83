"""``hypnos bench``: measure one or two running servers side by side (bench/serving.py does
the measuring; this module parses and renders)."""
from __future__ import annotations

import os
from pathlib import Path

import click
import httpx

from hypnos.cli.client import DEFAULT_URL
from hypnos.cli.common import console, is_tty, json_option, print_json
from hypnos.cli.params import CommaList


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise click.BadParameter(f"{text!r}: give positive integers, e.g. 1,2,4,8",
                                 param_hint="--concurrency")
    return levels


@click.command("bench")
@click.option("--url", "urls", multiple=True, metavar="URL",
              help="A server's base URL (Hypnos or any OpenAI-compatible one); give it twice "
                   "to compare two servers (default: HYPNOS_URL or " + DEFAULT_URL + ").")
@click.option("--api-key", envvar="HYPNOS_API_KEY", metavar="KEY",
              help="API key for every --url (HYPNOS_API_KEY).")
@json_option
@click.option("--runs", type=click.IntRange(1), default=5, show_default=True,
              help="Measured runs per figure (after one warm-up).")
@click.option("--max-tokens", type=click.IntRange(2), default=64, show_default=True,
              help="Tokens each chat request asks for.")
@click.option("--concurrency", default="1,2,4,8", show_default=True,
              help="Concurrency levels of the sweep.")
@click.option("--only", type=CommaList(("chat", "concurrency", "tier", "embeddings",
                                        "transcription", "speech")),
              help="Comma-separated sections (default: every one the server has a model for).")
@click.option("--chat-model", help="Chat model id (default: the server's first chat model).")
@click.option("--embedding-model", help="Embedding model id.")
@click.option("--transcription-model", help="Speech-to-text model id.")
@click.option("--speech-model", help="Text-to-speech model id.")
@click.option("--audio", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A WAV file to transcribe (default: the speech model speaks a passage).")
@click.option("--embed-batch", type=click.IntRange(1), default=32, show_default=True,
              help="Texts per embeddings request.")
def bench(urls, api_key, as_json: bool, runs: int, max_tokens: int, concurrency: str,
          only, chat_model, embedding_model, transcription_model, speech_model, audio,
          embed_batch: int) -> None:
    """Benchmark chat time to first token and decode tokens/s (median, p95), a concurrency
    sweep, cold vs warm tier switches (Hypnos only), embeddings texts/s, transcription
    real-time factor and speech time to first audio. With two --url the figures of both
    servers share one table with the ratio second / first. Exit 1 when a section failed."""
    from hypnos.bench import serving
    urls = list(urls) or [os.environ.get("HYPNOS_URL") or DEFAULT_URL]
    if len(urls) > 2:
        raise click.UsageError("give at most two --url")
    models = {k: v for k, v in (("text_generation", chat_model),
                                ("embeddings", embedding_model),
                                ("speech_to_text", transcription_model),
                                ("text_to_speech", speech_model)) if v}
    options = serving.Options(runs=runs, max_tokens=max_tokens, concurrency=_levels(concurrency),
                              embed_batch=embed_batch, sections=tuple(only or serving.SECTIONS),
                              models=models, audio=audio.read_bytes() if audio else None)
    targets = [serving.Target(u, api_key) for u in urls]
    try:
        _run(serving, targets, options, quiet=as_json)
    except httpx.TransportError as exc:
        from hypnos.cli.client import Unreachable
        raise Unreachable(f"cannot reach the server: {exc}") from None
    except httpx.HTTPStatusError as exc:
        from hypnos.cli.client import error_of
        raise error_of(exc.response) from None
    result = {"targets": [t.to_dict() for t in targets]}
    if len(targets) == 2:
        result["ratios"] = serving.ratios(*targets)
    if as_json:
        print_json(result)
    else:
        _table(targets, result.get("ratios"))
    if any(t.errors for t in targets):
        raise click.ClickException("some sections failed (see above)")


def _run(serving, targets, options, quiet: bool) -> None:
    if quiet or not is_tty():
        serving.run(targets, options)
        return
    with console().status("measuring") as status:
        serving.run(targets, options, progress=lambda text: status.update(text))


def _table(targets, ratios: dict | None) -> None:
    from rich.table import Table
    out = console()
    table = Table(title="hypnos bench")
    table.add_column("figure", no_wrap=True)
    table.add_column("unit", no_wrap=True)
    table.add_column("better", no_wrap=True)
    for t in targets:
        table.add_column(f"{t.url} ({'hypnos' if t.hypnos else 'other'})", justify="right")
    if ratios is not None:
        table.add_column("second / first", justify="right")
    for key in dict.fromkeys(m.key for t in targets for m in t.metrics):
        cells = [next((m for m in t.metrics if m.key == key), None) for t in targets]
        known = next(m for m in cells if m is not None)
        row = [key, known.unit, known.better]
        row += ["-" if m is None or m.value is None else f"{m.value:,.2f}" for m in cells]
        if ratios is not None:
            row.append(f"{ratios[key]:.2f}" if key in ratios else "-")
        table.add_row(*row)
    out.print(table)
    for t in targets:
        out.print(f"{t.url}: models {t.models or '-'}", markup=False)
        for section, why in t.skipped.items():
            out.print(f"  {section}: skipped ({why})", markup=False)
        for section, err in t.errors.items():
            out.print(f"  {section}: FAILED {err}", markup=False)
