"""Ollama's API (/api/*) through the official `ollama` Python client against a real
`hypnos serve`: the default chat model (Qwen2.5-Coder-0.5B, with two aliases) and the
embeddings model (evicted after 2 s idle). Assertions hold whatever the greedy path: shapes,
counts, grammars obeyed, tiers moved."""
from __future__ import annotations

import json
import os
import sys
import time

import httpx
import ollama
import pytest

from conftest import MODELS_DIR, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

QWEN = MODELS_DIR / "qwen2.5-coder-0.5b" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
CONFIG = f"""
models_dir = "{MODELS_DIR}"
[[models]]
id = "qwen2.5-coder:0.5b"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
quant = "Q4_K_M"
context_len = 4096
aliases = ["gpt-5", "claude-sonnet-4-5"]
[[models]]
id = "minilm-l6-v2"
modality = "embeddings"
engine = "onnx_runtime"
weights_path = "minilm-l6-v2/model.int8.onnx"
tokenizer_path = "minilm-l6-v2/tokenizer.json"
idle_evict_secs = 2
"""
MODEL = "qwen2.5-coder:0.5b"
T0 = {"temperature": 0, "seed": 3}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not QWEN.exists():
        pytest.fail(f"{QWEN} is missing: run `./run.sh models {MODEL}` first")
    tmp = tmp_path_factory.mktemp("ollama")
    path = tmp / "hypnos.toml"
    path.write_text(CONFIG)
    srv = ServerProcess(path, tmp / "server.log", ready_timeout=180,
                        env={"HYPNOS_MODELS_DIR": os.fspath(MODELS_DIR)})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.base)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_list_show_and_version(client, server):
    names = {m.model for m in client.list().models}
    assert {MODEL, "minilm-l6-v2"} <= names
    shown = client.show(MODEL)
    assert "completion" in shown.capabilities and "tools" in shown.capabilities
    assert shown.details.quantization_level == "Q4_K_M"
    assert httpx.get(server.base + "/api/version").json()["version"]


def test_chat_whole_and_streamed(client):
    r = client.chat(model=MODEL, messages=user("Say hi"), options={**T0, "num_predict": 8})
    assert r.done and r.done_reason in ("stop", "length") and r.message.role == "assistant"
    assert 0 < r.eval_count <= 8 and r.prompt_eval_count > 0 and r.message.content
    parts = list(client.chat(model=MODEL, messages=user("Count to three."), stream=True,
                             options={**T0, "num_predict": 8}))
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert 0 < parts[-1].eval_count <= 8
    assert "".join(p.message.content for p in parts).strip()


def test_generate_and_num_predict(client):
    g = client.generate(model=MODEL, prompt="Why is the sky blue?", options={**T0,
                                                                            "num_predict": 5})
    assert g.done and g.eval_count == 5 and g.done_reason == "length" and g.response
    raw = client.generate(model=MODEL, prompt="def add(a, b):", raw=True,
                          options={**T0, "num_predict": 6})
    assert raw.done and raw.eval_count > 0


def test_format_schema_is_obeyed(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.chat(model=MODEL, messages=user("Bob is 30. Give his name and age as JSON."),
                    format=schema, options={**T0, "num_predict": 40})
    answer = json.loads(r.message.content)
    assert set(answer) == {"name", "age"} and isinstance(answer["age"], int)
    loose = client.chat(model=MODEL, messages=user("Reply with a JSON object."),
                        format="json", options={**T0, "num_predict": 24})
    assert loose.message.content.lstrip().startswith("{")


def test_embed_both_routes(client, server):
    e = client.embed(model="minilm-l6-v2", input=["hello", "world"])
    assert len(e.embeddings) == 2 and len(e.embeddings[0]) == 384
    old = httpx.post(server.base + "/api/embeddings",
                     json={"model": "minilm-l6-v2", "prompt": "hello"}, timeout=60).json()
    assert old["embedding"] == pytest.approx(e.embeddings[0], abs=1e-5)


def test_keep_alive_zero_demotes_and_ps_follows(client, server):
    client.generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
    assert MODEL in {m.model for m in client.ps().models}
    row = next(m for m in client.ps().models if m.model == MODEL)
    assert row.size_vram == 0           # a CPU build books no VRAM
    client.generate(model=MODEL, prompt="", keep_alive=0)
    assert MODEL not in {m.model for m in client.ps().models}
    status = httpx.get(server.base + "/v1/memory/status").json()
    tier = next(m["current_tier"] for m in status["models"] if m["id"] == MODEL)
    assert tier == "tier2_pinned_ram"
    client.chat(model=MODEL, messages=user("Hi"), options={"num_predict": 1}, keep_alive="10m")
    row = next(m for m in client.ps().models if m.model == MODEL)
    assert row.expires_at is not None


@pytest.mark.parametrize("path, body, status, fragment", [
    ("/api/chat", {"model": "nope", "messages": user("x")}, 404, "nope"),
    ("/api/chat", {"model": MODEL, "messages": user("x"), "format": "yaml"}, 400, "format"),
    ("/api/chat", {"model": MODEL, "messages": user("x"), "keep_alive": "soon"}, 400,
     "keep_alive"),
    ("/api/chat", {"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}, 400,
     "role"),
    ("/api/embed", {"model": "minilm-l6-v2", "input": []}, 400, "input"),
    ("/api/show", {}, 400, "model"),
])
def test_bad_requests_get_ollama_envelope(server, path, body, status, fragment):
    resp = httpx.post(server.base + path, json=body, timeout=60)
    assert resp.status_code == status, resp.text
    assert set(resp.json()) == {"error"} and fragment in resp.json()["error"]


def test_aliases_reach_the_model_in_every_dialect(client, server):
    listed = {m["id"]: m for m in httpx.get(server.base + "/v1/models").json()["data"]}
    assert listed["gpt-5"]["alias_of"] == MODEL and listed["claude-sonnet-4-5"]["alias_of"]
    r = client.chat(model="gpt-5", messages=user("Hi"), options={"num_predict": 2})
    assert r.done and r.eval_count > 0
    msg = httpx.post(server.base + "/v1/messages", timeout=120, json={
        "model": "claude-sonnet-4-5", "max_tokens": 2, "messages": user("Hi")})
    assert msg.status_code == 200 and msg.json()["usage"]["output_tokens"] > 0


def test_idle_evict_secs_moves_an_idle_model_to_disk(client, server):
    client.embed(model="minilm-l6-v2", input="hello")
    deadline = time.monotonic() + 40           # 2 s idle, a sweep every 5 s
    tier = None
    while time.monotonic() < deadline:
        status = httpx.get(server.base + "/v1/memory/status").json()
        tier = next(m["current_tier"] for m in status["models"] if m["id"] == "minilm-l6-v2")
        if tier == "tier3_nvme_ssd":
            break
        time.sleep(1)
    assert tier == "tier3_nvme_ssd"
