"""docs/admin.sh, the example script of docs/cli.md, run against a real `hypnos serve` that it
starts waiting for before the port is even open."""
import os
import re
import subprocess
import sys

import httpx
import pytest

from conftest import lineup_config, model_block, ROOT, require_smollm2
from hypnos.bench.harness import free_port

pytestmark = [pytest.mark.real, pytest.mark.slow]
SCRIPT = ROOT / "docs" / "admin.sh"
KEY = "admin-script-key"
CONFIG = lineup_config(model_block("minilm", "embeddings"), server=f'api_keys = ["{KEY}"]')


def test_the_cli_page_shows_the_script_as_it_is():
    assert SCRIPT.read_text() in (ROOT / "docs" / "cli.md").read_text()


@pytest.fixture
def env(tmp_path):
    """`hypnos` on PATH as this interpreter's module, pointed at a server on a free port."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hypnos").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hypnos.cli "$@"\n')
    (bin_dir / "hypnos").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "HYPNOS_URL": f"http://127.0.0.1:{free_port()}", "HYPNOS_API_KEY": KEY}
    env.pop("HYPNOS_API_KEYS", None)
    return env


def test_admin_script_against_a_starting_server(tmp_path, env):
    require_smollm2()
    (tmp_path / "hypnos.toml").write_text(CONFIG)
    port = env["HYPNOS_URL"].rsplit(":", 1)[1]
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 (closed after the server, below)
    server = subprocess.Popen([sys.executable, "-m", "hypnos.cli", "serve", "--config",
                               str(tmp_path / "hypnos.toml"), "--port", port],
                              stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        run = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                             timeout=400)
        assert run.returncode == 0, run.stdout + run.stderr
        out = run.stdout
        assert "smollm2:135m: added" in out
        # --context is the least the promotion funds (the catalog block asks for 8192).
        moved = re.search(r"^smollm2:135m: tier1_gpu_vram, 30 GPU layers, context (\d+)$", out,
                          re.MULTILINE)
        assert moved and int(moved.group(1)) >= 4096, out
        # An error the script's last step must list; then the script again: idempotent.
        bad = httpx.post(env["HYPNOS_URL"] + "/v1/chat/completions", timeout=60,
                         headers={"Authorization": f"Bearer {KEY}"},
                         json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]})
        assert bad.status_code == 404
        again = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                               timeout=400)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "smollm2:135m is already in the pool" in again.stdout
        assert bad.headers["x-request-id"] in again.stdout
    finally:
        server.terminate()
        server.wait(30)
        log.close()
