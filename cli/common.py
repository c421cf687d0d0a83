"""Helpers shared by the commands: config resolution, JSON output, error conversion."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from hypnos.service.config.load import ConfigError, load_config
from hypnos.service.config.schema import Config

config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
    envvar="HYPNOS_CONFIG",
    help="Config file (default: ./hypnos.toml when present, else the built-in defaults).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def resolve_config(path: Path | None, **overrides) -> Config:
    """Load ``path`` (or ./hypnos.toml, or defaults). HYPNOS_MODELS_DIR overrides models_dir.
    A bad config is a ClickException (exit 1) listing every problem."""
    if path is None and Path("hypnos.toml").exists():
        path = Path("hypnos.toml")
    try:
        cfg = load_config(path, **overrides)
    except ConfigError as exc:
        raise click.ClickException("invalid config:\n  " + "\n  ".join(exc.problems)) from None
    if os.environ.get("HYPNOS_MODELS_DIR"):
        cfg.models_dir = Path(os.environ["HYPNOS_MODELS_DIR"]).resolve()
    return cfg


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def is_tty() -> bool:
    return sys.stdout.isatty()


def console(**kw):
    """A rich console for people: colours on a TTY only, a fixed width when piped."""
    from rich.console import Console
    tty = is_tty()
    return Console(no_color=not tty, highlight=False, width=None if tty else 120, **kw)


def complete_model_ids(ctx: click.Context, param, incomplete: str):
    """Shell completion of a model id: the server's pool (--url, HYPNOS_URL or the default
    URL, half a second at most), else the catalog's ids."""
    from hypnos.cli.client import DEFAULT_URL, Client
    url = ctx.params.get("url") or os.environ.get("HYPNOS_URL") or DEFAULT_URL
    ids: list[str] = []
    try:
        client = Client(url, ctx.params.get("api_key") or os.environ.get("HYPNOS_API_KEY"))
        ids = [m["id"] for m in client.get("/v1/memory/status", timeout=0.5)["models"]]
    except (click.ClickException, KeyError, TypeError, ValueError):
        from hypnos.catalog.catalog import load_catalog
        ids = [e.id for e in load_catalog().entries]
    return [i for i in ids if i.startswith(incomplete)]
