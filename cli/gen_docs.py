"""Generate ``completions/`` and ``man/`` from the click command tree.

    python -m hypnos.cli.gen_docs        # rewrite the files
A test regenerates them in memory and fails when the files on disk are stale.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click
from click.shell_completion import get_completion_class

from hypnos.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
SHELLS = {"bash": "hypnos.bash", "zsh": "_hypnos", "fish": "hypnos.fish"}
EXIT_CODES = [("0", "success"),
              ("1", "the command ran and failed: no lineup fits, a pull failed, a bad config, "
                    "a server check failed"),
              ("2", "usage error: a bad option value, an unknown need or model spec")]


def completion_scripts() -> dict[str, str]:
    out = {}
    for shell, name in SHELLS.items():
        comp = get_completion_class(shell)(cli, {}, "hypnos", "_HYPNOS_COMPLETE")
        out[f"completions/{name}"] = comp.source()
    return out


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("-", "\\-").replace("'", "\\(aq")


def _commands(group: click.Group, prefix: str):
    for name in sorted(group.commands):
        cmd = group.commands[name]
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}", cmd


def man_page() -> str:
    ctx = click.Context(cli, info_name="hypnos", **cli.context_settings)
    lines = ['.TH HYPNOS 1 "" "hypnos" "User Commands"', ".SH NAME",
             "hypnos \\- " + _esc((cli.help or "").split("\n")[0].split(": ", 1)[-1]),
             ".SH SYNOPSIS", ".B hypnos", "COMMAND [OPTIONS] [ARGS]...", ".SH COMMANDS"]
    for path, cmd in _commands(cli, "hypnos"):
        sub = click.Context(cmd, info_name=path, parent=ctx)
        lines += [".TP", f".B {_esc(path)} {_esc(' '.join(cmd.collect_usage_pieces(sub)))}",
                  _esc(" ".join((cmd.help or "").split()))]
        for param in cmd.params:       # the help option is described once, below
            record = param.get_help_record(sub)
            if record:
                lines += [".RS", ".TP", f".B {_esc(record[0])}", _esc(record[1]), ".RE"]
    lines += [".SH OPTIONS", ".TP", ".B \\-h, \\-\\-help",
              "Every command shows its help and exits.", ".TP", ".B \\-\\-version",
              "Print the version and exit.", ".SH EXIT STATUS"]
    for code, meaning in EXIT_CODES:
        lines += [".TP", f".B {code}", _esc(meaning)]
    lines += [".SH ENVIRONMENT", ".TP", ".B HYPNOS_CONFIG", "config file (like \\-\\-config)",
              ".TP", ".B HYPNOS_PORT", "port of the server", ".TP", ".B HYPNOS_API_KEYS",
              "comma\\-separated API keys", ".TP", ".B HYPNOS_MODELS_DIR",
              "overrides models_dir", ""]
    return "\n".join(lines)


def generated() -> dict[str, str]:
    return {**completion_scripts(), "man/hypnos.1": man_page()}


def main() -> None:
    for rel, text in generated().items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {rel}", file=sys.stderr)


if __name__ == "__main__":
    main()
