"""Generate ``completions/`` and ``man/`` from the click command tree and the config schema,
and docs/api.md from the server's OpenAPI document (``cli/api_doc.py``).

    python -m hypnos.cli.gen_docs        # rewrite the files

man/hypnos.1 is the whole reference; man/hypnos-<command>.1 one page per command and group
(git's naming: hypnos-tier-move.1); man/hypnos.toml.5 every config key. A test regenerates
everything in memory and fails when the files on disk are stale, or when a stale page lies
in man/. ``./run.sh`` copies the pages into .venv/share/man, where man(1) finds them once
.venv/bin is on PATH.
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import click
from click.shell_completion import get_completion_class

from hypnos.cli import api_doc
from hypnos.cli.config_doc import config_keys
from hypnos.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
SHELLS = {"bash": "hypnos.bash", "zsh": "_hypnos", "fish": "hypnos.fish"}
EXIT_CODES = [("0", "success"),
              ("1", "the command ran and failed: the server answered an error (its message is "
                    "printed as it is, then the HTTP status and error type; with --json the "
                    "error body also goes to stdout), no lineup fits, a pull failed, a bad "
                    "config, a server check or a benchmark section failed"),
              ("2", "usage error: a bad option value, an unknown need, model spec or tier"),
              ("3", "the server cannot be reached at --url (connection refused, unknown host, "
                    "TLS failure)")]
ENVIRONMENT = [("HYPNOS_URL", "base URL of the server the client commands talk to "
                              "(like \\-\\-url; default http://127.0.0.1:9999)"),
               ("HYPNOS_API_KEY", "API key the client commands send (like \\-\\-api\\-key)"),
               ("HYPNOS_CONFIG", "config file (like \\-\\-config)"),
               ("HYPNOS_PORT", "port of the server"),
               ("HYPNOS_API_KEYS", "comma\\-separated API keys the server accepts"),
               ("HYPNOS_MODELS_DIR", "overrides models_dir")]
COMMON = ("Commands that talk to a running server take \\-\\-url (HYPNOS_URL, default "
          "http://127.0.0.1:9999) and \\-\\-api\\-key (HYPNOS_API_KEY). \\-\\-json prints the "
          "server's JSON for scripts. Colours, pictures and progress appear only on a "
          "terminal; piped output is plain text.")


def completion_scripts() -> dict[str, str]:
    out = {}
    for shell, name in SHELLS.items():
        comp = get_completion_class(shell)(cli, {}, "hypnos", "_HYPNOS_COMPLETE")
        out[f"completions/{name}"] = comp.source()
    return out


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("-", "\\-").replace("'", "\\(aq")


def _commands(group: click.Group, prefix: str, groups: bool = False):
    """(path, command) of every command under ``group``; with ``groups`` the groups too."""
    for name in sorted(group.commands):
        cmd = group.commands[name]
        if isinstance(cmd, click.Group):
            if groups:
                yield f"{prefix} {name}", cmd
            yield from _commands(cmd, f"{prefix} {name}", groups)
        else:
            yield f"{prefix} {name}", cmd


def _context(path: str, cmd: click.Command) -> click.Context:
    root = click.Context(cli, info_name="hypnos", **cli.context_settings)
    return click.Context(cmd, info_name=path, parent=root)


def _synopsis(path: str, cmd: click.Command) -> str:
    return f".B {_esc(path)}\n{_esc(' '.join(cmd.collect_usage_pieces(_context(path, cmd))))}"


def _options(path: str, cmd: click.Command) -> list[str]:
    lines = []
    for param in cmd.params:       # the help option is described once, in hypnos(1)
        record = param.get_help_record(_context(path, cmd))
        if record and record[1]:
            lines += [".TP", f".B {_esc(record[0])}", _esc(record[1])]
    return lines


def _page_name(path: str) -> str:
    return path.replace(" ", "-")


def _exit_status() -> list[str]:
    lines = [".SH EXIT STATUS"]
    for code, meaning in EXIT_CODES:
        lines += [".TP", f".B {code}", _esc(meaning)]
    return lines


def man_page() -> str:
    """hypnos(1): every command with its options, the exit codes, the environment."""
    lines = ['.TH HYPNOS 1 "" "hypnos" "User Commands"', ".SH NAME",
             "hypnos \\- " + _esc((cli.help or "").split("\n")[0].split(": ", 1)[-1]),
             ".SH SYNOPSIS", ".B hypnos", "COMMAND [OPTIONS] [ARGS]...",
             ".SH DESCRIPTION", COMMON, ".SH COMMANDS"]
    for path, cmd in _commands(cli, "hypnos"):
        sub = _context(path, cmd)
        lines += [".TP", f".B {_esc(path)} {_esc(' '.join(cmd.collect_usage_pieces(sub)))}",
                  _esc(" ".join((cmd.help or "").split())) + f" See {_page_name(path)}(1)."]
        for param in cmd.params:
            record = param.get_help_record(sub)
            if record and record[1]:
                lines += [".RS", ".TP", f".B {_esc(record[0])}", _esc(record[1]), ".RE"]
    lines += [".SH OPTIONS", ".TP", ".B \\-h, \\-\\-help",
              "Every command shows its help and exits.", ".TP", ".B \\-\\-version",
              "Print the version and exit."]
    lines += _exit_status() + [".SH ENVIRONMENT"]
    for name, meaning in ENVIRONMENT:
        lines += [".TP", f".B {name}", meaning]
    lines += [".SH FILES", ".TP", ".B hypnos.toml",
              "the config file; every key is in hypnos.toml(5)", ".TP",
              ".B <config name>.models.toml",
              "the overlay of pool changes made through POST/PUT/DELETE /v1/models",
              ".SH SEE ALSO", ", ".join(f"{_page_name(p)}(1)" for p, _ in
                                        _commands(cli, "hypnos", groups=True))
              + ", hypnos.toml(5)", ""]
    return "\n".join(lines)


def command_page(path: str, cmd: click.Command) -> str:
    """hypnos-<command>(1): synopsis, the full help, options, subcommands, exit codes."""
    name = _page_name(path)
    summary = (cmd.help or "").strip().split(". ")[0].split("\n\n")[0]
    lines = [f'.TH {name.upper()} 1 "" "hypnos" "User Commands"', ".SH NAME",
             f"{_esc(name)} \\- {_esc(' '.join(summary.split()))}", ".SH SYNOPSIS",
             _synopsis(path, cmd), ".SH DESCRIPTION"]
    for para in (cmd.help or "").split("\n\n"):
        if para.strip().startswith("\b"):       # click's "keep these lines as they are"
            kept = textwrap.dedent("\n".join(para.strip("\n").splitlines()[1:]))
            lines += [".nf", *[_esc(line.rstrip()) for line in kept.splitlines()], ".fi",
                      ".PP"]
        else:
            lines += [_esc(" ".join(para.split())), ".PP"]
    lines.pop()
    if isinstance(cmd, click.Group):
        lines.append(".SH COMMANDS")
        for sub_name in sorted(cmd.commands):
            sub = cmd.commands[sub_name]
            lines += [".TP", f".B {_esc(path)} {_esc(sub_name)}",
                      _esc(sub.get_short_help_str(200)) + f" See {name}-{sub_name}(1)."]
    options = _options(path, cmd)
    if options or any(isinstance(p, click.Argument) for p in cmd.params):
        lines += [".SH OPTIONS", *options, ".TP", ".B \\-h, \\-\\-help",
                  "Show the help and exit."]
    if any(p.name == "url" for p in cmd.params):
        lines += [".SH NOTES", COMMON]
    lines += _exit_status()
    see = ["hypnos(1)"]
    if path == "hypnos serve":
        see.append("hypnos.toml(5)")
    lines += [".SH SEE ALSO", ", ".join(see), ""]
    return "\n".join(lines)


def config_page() -> str:
    """hypnos.toml(5): every key of the config file, read off the schema."""
    lines = ['.TH HYPNOS.TOML 5 "" "hypnos" "File Formats"', ".SH NAME",
             "hypnos.toml \\- the Hypnos server's config file", ".SH DESCRIPTION",
             "A TOML file read by hypnos serve \\-\\-config (HYPNOS_CONFIG, or ./hypnos.toml). "
             "Every key is optional except a model's id, modality and engine; defaults are "
             "those below. Paths in [[models]] are relative to models_dir. Pool changes made "
             "while the server runs are kept in <config name>.models.toml next to it.",
             ".SH KEYS"]
    for key in config_keys():
        if key.table:
            lines += [".SS " + _esc(key.type), _esc(key.help)]
            continue
        default = f" (default {key.default})" if key.default else " (required)"
        lines += [".TP", f".B {_esc(key.path)}",
                  _esc(f"{key.type}{default}. {key.help}")]
    lines += [".SH SEE ALSO", "hypnos(1), hypnos\\-serve(1)", ""]
    return "\n".join(lines)


def man_pages() -> dict[str, str]:
    pages = {"man/hypnos.1": man_page(), "man/hypnos.toml.5": config_page()}
    for path, cmd in _commands(cli, "hypnos", groups=True):
        pages[f"man/{_page_name(path)}.1"] = command_page(path, cmd)
    return pages


def generated() -> dict[str, str]:
    return {**completion_scripts(), **man_pages(), api_doc.OUTPUT: api_doc.api_markdown()}


def main() -> None:
    files = generated()
    for stale in (ROOT / "man").glob("*.[15]"):
        if f"man/{stale.name}" not in files:
            stale.unlink()
            print(f"removed man/{stale.name}", file=sys.stderr)
    for rel, text in files.items():
        path = ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {rel}", file=sys.stderr)


if __name__ == "__main__":
    main()
