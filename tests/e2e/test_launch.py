"""hypnos launch against a real `hypnos serve` (the default chat model, Qwen2.5-Coder-0.5B, and
SmolLM2 with its 8k context, an API key set): --print of each client, the model choice, the
refusals, --save; then the real Claude Code, Codex and opencode (agent_clients.py installs the
pinned versions) each completing one short turn through it with no warning.

The clients get a temporary HOME so nothing of the user's is read or written."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib

import pytest
from click.testing import CliRunner

from agent_clients import agent_bin
from conftest import MODELS_DIR, require_smollm2
from hypnos.bench.harness import ServerProcess, free_port
from hypnos.cli.main import cli

pytestmark = [pytest.mark.real, pytest.mark.slow]
KEY = "sk-launch-test"
QWEN = MODELS_DIR / "qwen2.5-coder-0.5b" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
CONFIG = f"""models_dir = "{MODELS_DIR}"
[server]
api_keys = ["{KEY}"]

[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
context_len = 8192

[[models]]
id = "qwen2.5-coder:0.5b"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
# A slot per client: Codex and opencode each bind one to their session (prompt_cache_key)
# for as long as the server runs.
context_len = 49152
slots = 3
initial_tier = "tier1_gpu_vram"
"""
# Words a client prints when something is off (Codex's "Defaulting to fallback metadata",
# Claude Code's "Auth conflict" warning, a retried stream).
TROUBLE = ("warning", "fallback", "retry", "retrying", "conflict", "timed out")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    if not QWEN.exists():
        pytest.fail(f"{QWEN} is missing: run `./run.sh models qwen2.5-coder:0.5b` first")
    tmp = tmp_path_factory.mktemp("launch")
    (tmp / "hypnos.toml").write_text(CONFIG)
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=300)
    yield srv
    srv.stop()


def launch(server, *args, key: str | None = KEY, env: dict | None = None):
    full = {"HYPNOS_URL": server.base, "HYPNOS_API_KEY": key, **(env or {})}
    return CliRunner().invoke(cli, ["launch", *args], env=full,
                                              catch_exceptions=False)


@pytest.mark.parametrize("client", ["claude", "codex", "opencode", "continue", "zed",
                                    "open-webui"])
def test_print_shows_each_clients_setup_on_the_default_chat_model(server, client):
    r = launch(server, client, "--print")
    assert r.exit_code == 0, r.output + r.stderr
    assert server.base in r.output
    assert KEY not in r.output                          # the key only by reference
    assert r.stderr == ""                                # qwen holds every client's prompt
    chosen = {"claude": "export ANTHROPIC_MODEL=qwen2.5-coder:0.5b",
              "codex": 'model = "qwen2.5-coder:0.5b"',
              "opencode": '"model": "hypnos/qwen2.5-coder:0.5b"'}
    assert chosen.get(client, "qwen2.5-coder:0.5b" if client != "open-webui" else "") \
        in r.stdout


def test_a_model_too_small_for_claude_code_is_named_with_a_warning(server):
    r = launch(server, "claude", "--print", "--model", "smol")
    assert r.exit_code == 0, r.output
    assert "export ANTHROPIC_MODEL=smol" in r.output
    assert "smol serves 8,192 tokens per request" in r.stderr


def test_without_the_key_launch_says_to_set_hypnos_api_key(server):
    r = launch(server, "codex", "--print", key=None)
    assert r.exit_code == 1
    assert "wants an API key: set HYPNOS_API_KEY" in r.stderr


def test_with_no_server_launch_prints_the_serve_command(tmp_path):
    port = free_port()
    r = CliRunner().invoke(
        cli, ["launch", "claude", "--url", f"http://127.0.0.1:{port}"], catch_exceptions=False)
    assert r.exit_code == 3
    assert f"no Hypnos server answers at http://127.0.0.1:{port}" in r.stderr
    assert f"hypnos serve --port {port}" in r.stderr and "--serve" in r.stderr


def test_save_merges_into_the_clients_own_files(server, tmp_path):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text('{"theme": "dark", "env": {"A": "1"}}')
    env = {"HOME": str(home), "CODEX_HOME": None, "CLAUDE_CONFIG_DIR": None,
           "XDG_CONFIG_HOME": None}
    for client in ("claude", "codex", "opencode"):
        r = launch(server, client, "--save", env=env)
        assert r.exit_code == 0, r.output + r.stderr
    claude = json.loads((home / ".claude" / "settings.json").read_text())
    assert claude["theme"] == "dark" and claude["env"]["A"] == "1"
    assert claude["env"]["ANTHROPIC_BASE_URL"] == server.base
    codex = tomllib.loads((home / ".codex" / "hypnos.config.toml").read_text())
    assert codex["model_providers"]["hypnos"]["base_url"] == server.base + "/v1"
    opencode = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    assert "qwen2.5-coder:0.5b" in opencode["provider"]["hypnos"]["models"]


# ------------------------------------------------------------------ the real clients

def run_client(server, tmp_path, client: str, *client_args: str) -> tuple[str, float]:
    """`hypnos launch CLIENT -- ARGS` as a user runs it, in an empty project folder with a
    temporary HOME; its output (stdout and stderr) and seconds."""
    bin_dir = agent_bin()
    project = tmp_path / "project"
    project.mkdir()
    # $TMPDIR elsewhere than the HOME the throwaway folders go under: Codex warns about a
    # CODEX_HOME inside $TMPDIR (pytest's tmp_path is in /tmp).
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_", "XDG_CACHE", "XDG_CONFIG"))}
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"),
               HYPNOS_URL=server.base, HYPNOS_API_KEY=KEY,
               PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "hypnos.cli", "launch", client, "--",
                           *client_args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=900, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - started
    print(f"hypnos launch {client}: {seconds:.0f} s")      # shown with -s: the tier's cost
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output, seconds


def assert_one_clean_turn(output: str) -> None:
    assert output.strip(), "the client printed no answer"
    # Codex's sandbox wants bubblewrap on PATH: a fact of the machine, not of the launch.
    lines = [line for line in output.lower().splitlines() if "bubblewrap" not in line]
    assert not [w for w in TROUBLE if any(w in line for line in lines)], output


def test_claude_code_completes_a_turn(server, tmp_path):
    output, _ = run_client(server, tmp_path, "claude", "-p", "Reply with the single word: ready",
                           "--system-prompt", "You answer in one word.", "--tools", "",
                           "--no-session-persistence")
    assert_one_clean_turn(output)


def test_codex_completes_a_turn(server, tmp_path):
    output, _ = run_client(server, tmp_path, "codex", "exec", "--skip-git-repo-check",
                           "--strict-config", "Reply with the single word: ready")
    assert_one_clean_turn(output)
    assert "provider: hypnos" in output and "qwen2.5-coder:0.5b" in output


def test_opencode_completes_a_turn(server, tmp_path):
    output, _ = run_client(server, tmp_path, "opencode", "run",
                           "Reply with the single word: ready")
    assert_one_clean_turn(output)
