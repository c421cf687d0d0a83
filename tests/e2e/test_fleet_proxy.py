"""A fleet behind LiteLLM's proxy: two real ``hypnos serve`` nodes, the config written by
``hypnos fleet-config`` from their ``/v1/models``, and the real proxy (its own cached venv,
``hypnos fleet-config --install-proxy``) on loopback.

Node A serves ``chat`` and ``minilm``; node B serves ``chat`` and ``solo``. Each request must
reach a node serving its model (counted on the nodes' own /v1/memory/status); once A is
stopped, ``chat`` keeps answering from B and ``minilm`` (only on A) fails with an error.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time

import httpx
import pytest

from conftest import MODELS_DIR, require_smollm2

from hypnos.bench.harness import ManagedProcess, ServerProcess

pytestmark = [pytest.mark.real, pytest.mark.slow]

SMOL = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
MASTER_KEY = "sk-" + secrets.token_hex(32)
ASK = [{"role": "user", "content": "Say hello."}]


def _chat_block(model_id: str) -> str:
    return (f'[[models]]\nid = "{model_id}"\nmodality = "text_generation"\n'
            f'engine = "ggml_llama"\nweights_path = "{SMOL}"\ncontext_len = 2048\n')


MINILM = ('[[models]]\nid = "minilm"\nmodality = "embeddings"\nengine = "onnx_runtime"\n'
          'weights_path = "minilm-l6-v2/model.int8.onnx"\n'
          'tokenizer_path = "minilm-l6-v2/tokenizer.json"\n')


def _node(tmp, name: str, blocks: str) -> ServerProcess:
    path = tmp / f"{name}.toml"
    path.write_text(f'models_dir = "{MODELS_DIR}"\n' + blocks)
    return ServerProcess(path, tmp / f"{name}.log", env={"HYPNOS_MODELS_DIR": str(MODELS_DIR)})


def _hypnos(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "hypnos.cli", *args], check=True,
                          capture_output=True, text=True, timeout=600).stdout.strip()


class Proxy(ManagedProcess):
    """``litellm --config FILE`` on a free port; ready once its liveness probe answers."""

    def __init__(self, litellm: str, config, log_path):
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "LITELLM_MASTER_KEY": MASTER_KEY,
               "LITELLM_TELEMETRY": "False", "NO_PROXY": "127.0.0.1,localhost"}
        env.pop("PYTHONPATH", None)            # its own venv, nothing of ours
        super().__init__(lambda port: [litellm, "--config", str(config), "--host", "127.0.0.1",
                                       "--port", str(port), "--num_workers", "1"],
                         log_path, "/health/liveliness", 180, env=env)


def served(node: ServerProcess) -> dict[str, int]:
    return {m["id"]: m["total_requests_served"] for m in node.status()["models"]}


@pytest.fixture(scope="module")
def litellm():
    return _hypnos("fleet-config", "--install-proxy")      # once per machine


def test_proxy_routes_on_model_and_fails_over(litellm, tmp_path):
    require_smollm2()
    a = _node(tmp_path, "a", _chat_block("chat") + MINILM)
    b = _node(tmp_path, "b", _chat_block("chat") + _chat_block("solo"))
    proxy = None
    try:
        config = tmp_path / "litellm.yaml"
        _hypnos("fleet-config", "--node", a.base, "--node", b.base, "--cooldown", "60",
                "-o", str(config))
        text = config.read_text()
        assert text.count("model_name: \"chat\"") == 2 and "api_base" in text
        proxy = Proxy(litellm, config, tmp_path / "proxy.log")
        client = httpx.Client(base_url=proxy.base, timeout=300,
                              headers={"Authorization": f"Bearer {MASTER_KEY}"})
        listed = {m["id"] for m in client.get("/v1/models").json()["data"]}
        assert listed == {"chat", "minilm", "solo"}
        # Each request reaches a node that serves its model.
        r = client.post("/v1/embeddings", json={"model": "minilm", "input": "a lighthouse"})
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 384
        r = client.post("/v1/chat/completions",
                        json={"model": "solo", "messages": ASK, "max_tokens": 4})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
        print(f"\nhypnos_telemetry through the proxy: {'hypnos_telemetry' in r.json()}")
        assert served(a).get("minilm") == 1 and served(b)["solo"] == 1
        for _ in range(4):
            r = client.post("/v1/chat/completions",
                            json={"model": "chat", "messages": ASK, "max_tokens": 4})
            assert r.status_code == 200
        assert served(a)["chat"] + served(b)["chat"] == 4
        # A stops: chat fails over to B; minilm, only on A, is an error, not a hang.
        before_b = served(b)["chat"]
        a.stop()
        for _ in range(3):
            r = client.post("/v1/chat/completions",
                            json={"model": "chat", "messages": ASK, "max_tokens": 4})
            assert r.status_code == 200, r.text
        assert served(b)["chat"] == before_b + 3
        started = time.monotonic()
        r = client.post("/v1/embeddings", json={"model": "minilm", "input": "x"})
        assert r.status_code >= 400 and "error" in r.json()
        print(f"\nminilm with its only node stopped: {r.status_code} after "
              f"{time.monotonic() - started:.1f} s: {r.json()['error'].get('message', '')[:160]}")
    finally:
        if proxy is not None:
            proxy.stop()
        b.stop()
        if a.proc.poll() is None:
            a.stop()
