"""The real agent CLIs the launch tests run, at pinned versions, installed once with npm into a
cache folder (HYPNOS_AGENTS_DIR, default ~/.cache/hypnos-tests/agents). Without npm the tests
fail with a message saying so: they are part of the tier, not optional."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

# client -> (npm package, version); bump together with docs/clients.md's measured figures.
PINS = {
    "claude": ("@anthropic-ai/claude-code", "2.1.197"),
    "codex": ("@openai/codex", "0.171.0"),
    "opencode": ("opencode-ai", "1.18.33"),
}


def agents_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("HYPNOS_AGENTS_DIR") or Path(cache) / "hypnos-tests" / "agents")


def agent_bin() -> Path:
    """node_modules/.bin holding claude, codex and opencode at the pinned versions; installs
    them (a few hundred MB, once) when the cache folder lacks them."""
    folder = agents_dir()
    stamp = folder / "hypnos-pins.json"
    wanted = json.dumps(PINS, sort_keys=True)
    bin_dir = folder / "node_modules" / ".bin"
    if stamp.exists() and stamp.read_text() == wanted and \
            all((bin_dir / name).exists() for name in PINS):
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is not installed: the hypnos launch e2e tests install Claude Code, "
                    "Codex and opencode with it (install Node.js 18+ with npm, e.g. "
                    "`apt-get install nodejs npm`)")
    folder.mkdir(parents=True, exist_ok=True)
    specs = [f"{package}@{version}" for package, version in PINS.values()]
    done = subprocess.run([npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund",
                           "--foreground-scripts", *specs],
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        pytest.fail(f"npm install {' '.join(specs)} failed ({done.returncode}):\n"
                    f"{done.stderr[-3000:]}")
    missing = [name for name in PINS if not (bin_dir / name).exists()]
    if missing:
        pytest.fail(f"npm installed no {', '.join(missing)} in {bin_dir}")
    stamp.write_text(wanted)
    return bin_dir
