"""Helpers shared by the commands: config resolution, JSON output, error conversion."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from hypnos.service.config import ConfigError, load_config
from hypnos.service.config_schema import Config

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
