"""``hypnos launch CLIENT --save``: the launch's settings written into the client's own config
files, merged with what is there (other keys, providers and profiles are kept)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

from hypnos.cli.launch import agents
from hypnos.cli.launch.plan import DUMMY_KEY, KEY_REF, KEY_VAR, Target


def save(client: str, t: Target, key: str | None) -> list[str]:
    """Write; the lines to show (what was written, how to start the client)."""
    if client == "claude":
        return _claude(t, key)
    if client == "codex":
        return _codex(t)
    if client == "opencode":
        return _opencode(t)
    raise click.ClickException(f"--save does not write {client}'s files: print them with "
                               "--print and merge them by hand")


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def _claude(t: Target, key: str | None) -> list[str]:
    path = Path(os.environ.get("CLAUDE_CONFIG_DIR") or _home() / ".claude") / "settings.json"
    settings = json.loads(path.read_text()) if path.exists() else {}
    env = agents.claude(t).env
    env = {k: v.replace(KEY_REF, key or DUMMY_KEY) for k, v in env.items()}
    settings["env"] = {**settings.get("env", {}), **env}
    _write(path, json.dumps(settings, indent=2) + "\n")
    return [f"wrote the Hypnos environment into {path} (env)", "start it with: claude"]


def _codex(t: Target) -> list[str]:
    """Codex 0.171's profiles are files beside config.toml (`codex --profile NAME` layers
    $CODEX_HOME/NAME.config.toml over it): a new file, config.toml untouched."""
    folder = Path(os.environ.get("CODEX_HOME") or _home() / ".codex")
    path = folder / f"{agents.PROVIDER}.config.toml"
    _write(path, agents.codex(t).files["codex/config.toml"])
    return [f"wrote {path}",
            f"start it with: {KEY_VAR}=<key or any text> codex --profile {agents.PROVIDER}"]


def _opencode(t: Target) -> list[str]:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or _home() / ".config")
    path = base / "opencode" / "opencode.json"
    config = json.loads(path.read_text()) if path.exists() else {
        "$schema": "https://opencode.ai/config.json"}
    ours = json.loads(agents.opencode(t).files["opencode.json"])
    config.setdefault("provider", {})[agents.PROVIDER] = ours["provider"][agents.PROVIDER]
    _write(path, json.dumps(config, indent=2) + "\n")
    return [f"wrote provider \"{agents.PROVIDER}\" into {path}",
            f"start it with: {KEY_VAR}=<key or any text> opencode -m "
            f"{agents.PROVIDER}/{t.model}"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".hypnos-tmp")
    tmp.write_text(text)
    tmp.replace(path)
