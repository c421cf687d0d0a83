"""`hypnos models add|replace|remove|enable|disable|moe-offload` and `hypnos logs` against a
real `hypnos serve` (SmolLM2-135M, and MiniLM added from the catalog while it runs)."""
import json
import os
import select
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner

from conftest import MODELS_DIR, require_smollm2
from hypnos.bench.harness import ServerProcess
from hypnos.cli.main import cli

pytestmark = [pytest.mark.real, pytest.mark.slow]
KEY = "pool-admin-key"
CONFIG = f"""
models_dir = "{MODELS_DIR}"
[server]
api_keys = ["{KEY}"]
[[server.keys]]
key = "plain-user-key"
label = "user"
[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
context_len = 2048
initial_tier = "tier1_gpu_vram"
"""
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    tmp = tmp_path_factory.mktemp("pool")
    (tmp / "hypnos.toml").write_text(CONFIG)
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=120)
    srv.config_dir = tmp
    yield srv
    srv.stop()


def hypnos(server, *args):
    env = {"HYPNOS_URL": server.base, "HYPNOS_API_KEY": KEY}
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def pool(server) -> dict:
    r = hypnos(server, "models", "list", "--json")
    assert r.exit_code == 0, r.output
    return {m["id"]: m for m in json.loads(r.output)["data"]}


def chat(server, model="smol") -> httpx.Response:
    return httpx.post(server.base + "/v1/chat/completions", headers=AUTH, timeout=300,
                      json={"model": model, "max_tokens": 4, "temperature": 0,
                            "messages": [{"role": "user", "content": "Say hi."}]})


def test_add_replace_remove_a_catalog_model(server):
    r = hypnos(server, "models", "add", "minilm-l6-v2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["action"] == "added"
    assert pool(server)["minilm-l6-v2"]["current_tier"] == "tier3_nvme_ssd"
    assert (server.config_dir / "hypnos.models.toml").exists()
    r = hypnos(server, "models", "add", "minilm-l6-v2")
    assert r.exit_code == 1 and "(400 invalid_request_error)" in r.output
    r = hypnos(server, "models", "replace", "minilm-l6-v2", "minilm-l6-v2", "--drain-secs", "5")
    assert r.exit_code == 0 and r.output == "minilm-l6-v2: replaced\n", r.output
    r = hypnos(server, "models", "remove", "minilm-l6-v2")
    assert r.exit_code == 0 and r.output == "minilm-l6-v2: removed\n", r.output
    assert "minilm-l6-v2" not in pool(server)


def test_a_key_that_is_not_an_admin_key_gets_the_servers_403(server):
    r = CliRunner().invoke(cli, ["models", "add", "minilm-l6-v2", "--api-key", "plain-user-key",
                                 "--url", server.base])
    assert r.exit_code == 1 and "(403 permission_denied)" in r.output, r.output
    assert "minilm-l6-v2" not in pool(server)


def test_add_a_config_block_from_stdin(server, tmp_path):
    block = ('[[models]]\nid = "mini2"\nmodality = "embeddings"\nengine = "onnx_runtime"\n'
             'weights_path = "minilm-l6-v2/model.int8.onnx"\n'
             'tokenizer_path = "minilm-l6-v2/tokenizer.json"\n')
    r = CliRunner().invoke(cli, ["models", "add", "--config-block", "-"], input=block,
                           env={"HYPNOS_URL": server.base, "HYPNOS_API_KEY": KEY})
    assert r.exit_code == 0 and r.output.startswith("mini2: added"), r.output
    emb = httpx.post(server.base + "/v1/embeddings", headers=AUTH, timeout=120,
                     json={"model": "mini2", "input": "a fox"})
    assert emb.status_code == 200 and len(emb.json()["data"][0]["embedding"]) == 384
    assert hypnos(server, "models", "remove", "mini2").exit_code == 0
    r = hypnos(server, "models", "add", "minilm-l6-v2", "--config-block", "-")
    assert r.exit_code == 2 and "either a catalog SPEC or --config-block" in r.output


def test_disable_enable_and_moe_offload(server):
    r = hypnos(server, "models", "disable", "smol")
    assert r.exit_code == 0 and r.output == "smol: disabled\n", r.output
    assert pool(server)["smol"]["enabled"] is False
    assert chat(server).json()["error"]["type"] == "model_disabled"
    r = hypnos(server, "models", "enable", "smol", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["enabled"] is True
    r = hypnos(server, "models", "moe-offload", "smol", "auto")
    assert r.exit_code == 0 and "moe_offload=auto" in r.output, r.output
    assert pool(server)["smol"]["moe_offload"] == "auto"
    assert hypnos(server, "models", "moe-offload", "smol", "off").exit_code == 0
    r = hypnos(server, "models", "moe-offload", "smol", "sometimes")
    assert r.exit_code == 2


def test_logs_list_show_level_clear(server):
    assert hypnos(server, "logs", "clear").output == "cleared\n"
    ok = chat(server)
    bad = chat(server, "nope")
    assert ok.status_code == 200 and bad.status_code == 404
    ok_id, bad_id = ok.headers["x-request-id"], bad.headers["x-request-id"]
    r = hypnos(server, "logs", "--json")
    ids = [rec["id"] for rec in json.loads(r.output)["records"]]
    assert ids[:2] == [bad_id, ok_id]                   # newest first
    r = hypnos(server, "logs", "--status", "error")
    assert r.exit_code == 0 and bad_id in r.output and ok_id not in r.output
    r = hypnos(server, "logs", "--model", "smol", "--status", "ok", "--json")
    assert [rec["id"] for rec in json.loads(r.output)["records"]] == [ok_id]
    r = hypnos(server, "logs", "show", ok_id, "--json")
    assert json.loads(r.output)["route"] == "/v1/chat/completions"
    r = hypnos(server, "logs", "show", "req-" + "0" * 32)
    assert r.exit_code == 1 and "404 not_found" in r.output
    r = hypnos(server, "logs", "level", "debug", "--json")
    assert json.loads(r.output) == {"level": "debug"}
    captured = chat(server).headers["x-request-id"]
    record = json.loads(hypnos(server, "logs", "show", captured, "--json").output)
    assert "Say hi." in json.dumps(record.get("input"))
    assert hypnos(server, "logs", "level", "info").exit_code == 0
    assert hypnos(server, "logs", "level", "loud").exit_code == 2
    hypnos(server, "logs", "clear")
    assert json.loads(hypnos(server, "logs", "--json").output)["records"] == []


def test_logs_follow_prints_the_latest_then_new_records_as_they_arrive(server):
    before = chat(server).headers["x-request-id"]
    env = {**os.environ, "HYPNOS_URL": server.base, "HYPNOS_API_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "hypnos.cli", "logs", "--follow", "--json",
                             "--limit", "1", "--interval", "0.2"],
                            stdout=subprocess.PIPE, text=True, env=env)

    def next_id() -> str:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no record printed within 60 s"
        return json.loads(proc.stdout.readline())["id"]
    try:
        assert next_id() == before
        after = chat(server).headers["x-request-id"]
        assert next_id() == after
    finally:
        proc.terminate()
        proc.wait(10)
