"""``hypnos serve --watch-config``: config edits applied to the pool with the startup checks;
a bad edit refused with its dotted key while the old pool keeps serving. In-process on the
ASGI app, and once against a real `hypnos serve` process."""
import logging
import os
import sys
import time

import httpx
import pytest
from click.testing import CliRunner
from sanic import Sanic

from conftest import MODELS_DIR, ROOT, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.cli.main import cli
from hypnos.service.app import create_app
from hypnos.service.config.load import load_config
from hypnos.service.lifecycle.config_watch import apply_config_file

sys.path.insert(0, str(ROOT / "bench"))
from harness import ManagedProcess  # noqa: E402

Sanic.test_mode = True
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"


def model_block(mid: str, **extra) -> str:
    lines = [f'id = "{mid}"', 'modality = "text_generation"', 'engine = "ggml_llama"',
             f'weights_path = "{GGUF}"']
    lines += [f"{k} = {v}" for k, v in {"context_len": 2048, **extra}.items()]
    return "[[models]]\n" + "\n".join(lines) + "\n"


def write(path, *blocks):
    path.write_text(f'models_dir = "{MODELS_DIR}"\n' + "".join(blocks))


@pytest.mark.anyio
async def test_edits_apply_and_bad_ones_are_refused_with_their_key(tmp_path, caplog):
    require_smollm2()
    caplog.set_level(logging.INFO, logger="hypnos.watch")
    path = tmp_path / "hypnos.toml"
    write(path, model_block("chat"))
    app = create_app(load_config(path, env={}), catalog=load_catalog(), stage=False)
    sched = app.ctx.scheduler

    write(path, model_block("chat"), model_block("extra"))
    diff = await apply_config_file(app, path)
    assert (diff.added, diff.replaced, diff.removed) == (["extra"], [], [])
    assert list(sched.models) == ["chat", "extra"]

    write(path, model_block("chat"), model_block("extra", slots=0))
    assert await apply_config_file(app, path) is None
    assert "hypnos.toml: models[1].slots: must be >= 1, got 0" in caplog.text
    write(path, model_block("chat"), model_block("extra").replace(GGUF, "gone.gguf"))
    assert await apply_config_file(app, path) is None
    assert "hypnos.toml: models[1].weights_path: 'gone.gguf' is not in models_dir" in caplog.text
    assert list(sched.models) == ["chat", "extra"]          # the old pool is untouched
    assert sched.models["extra"].cfg.slots == 1

    write(path, model_block("chat", context_len=3072))
    diff = await apply_config_file(app, path)
    assert (diff.added, diff.replaced, diff.removed) == ([], ["chat"], ["extra"])
    assert list(sched.models) == ["chat"]
    assert sched.models["chat"].cfg.context_len == 3072
    _req, resp = await app.asgi_client.post("/v1/chat/completions", json={
        "model": "extra", "messages": [{"role": "user", "content": "x"}]})
    assert resp.status == 404 and resp.json["error"]["type"] == "model_not_found"


def test_watch_config_needs_a_config_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                            # no ./hypnos.toml here
    result = CliRunner().invoke(cli, ["serve", "--watch-config"], env={"HYPNOS_CONFIG": None})
    assert result.exit_code == 2 and "--watch-config needs a config file" in result.output


@pytest.mark.real
@pytest.mark.slow
def test_a_running_server_follows_its_config_file(tmp_path):
    require_smollm2()
    path = tmp_path / "hypnos.toml"
    write(path, model_block("smol"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    srv = ManagedProcess(
        lambda port: [sys.executable, "-m", "hypnos.cli", "serve", "--config", str(path),
                      "--port", str(port), "--watch-config"],
        tmp_path / "server.log", "/ready", 120, env=env, cwd=ROOT)

    def ids():
        return [m["id"] for m in httpx.get(srv.base + "/v1/models").json()["data"]]

    def wait_for(check, secs=15):
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.2)
        return False
    try:
        write(path, model_block("smol"), model_block("smol2"))
        assert wait_for(lambda: ids() == ["smol", "smol2"])
        write(path, model_block("smol", slots="-1"))
        assert wait_for(lambda: "models[0].slots" in (tmp_path / "server.log").read_text())
        assert ids() == ["smol", "smol2"]                    # refused: the old pool serves
        resp = httpx.post(srv.base + "/v1/chat/completions", timeout=120, json={
            "model": "smol2", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
        assert resp.status_code == 200
    finally:
        srv.stop()
