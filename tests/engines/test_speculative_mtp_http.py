"""``speculative = "mtp"`` over HTTP (issue 30), through Sanic's ASGI client on the tiny
random-weight Qwen3.5 GGUFs (``tests/tiny_qwen35.py``): the one with a nextn block answers with
``hypnos_telemetry.speculative`` saying "mtp"; the one without is a 503 naming the missing
nextn layers, never a 500. Plumbing only (noise weights)."""
import tomllib

import pytest
from sanic import Sanic

from tiny_qwen35 import write_tiny_qwen35
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = [pytest.mark.anyio, pytest.mark.real]

BLOCK = ('[[models]]\nid = "{id}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
         'weights_path = "{id}.gguf"\ncontext_len = 1024\nspeculative = "mtp"\n')
ASK = [{"role": "user", "content": "Say something."}]


async def test_mtp_answers_with_its_telemetry_and_a_model_without_heads_is_a_503(tmp_path):
    write_tiny_qwen35(tmp_path / "heads.gguf", nextn=1)
    write_tiny_qwen35(tmp_path / "plain.gguf")
    cfg = parse_config(tomllib.loads(f'models_dir = "{tmp_path}"\n' + BLOCK.format(id="heads")
                                     + BLOCK.format(id="plain")))
    a = create_app(cfg, catalog=load_catalog(), stage=False)
    body = {"messages": ASK, "max_tokens": 12, "temperature": 1.0, "seed": 3}
    _req, resp = await a.asgi_client.post("/v1/chat/completions", json={"model": "heads",
                                                                        **body})
    assert resp.status == 200, resp.text
    spec = resp.json["hypnos_telemetry"]["speculative"]
    assert spec["method"] == "mtp" and spec["drafted"] > 0
    assert 0 <= spec["accepted"] <= spec["drafted"]
    _req, resp = await a.asgi_client.post("/v1/chat/completions", json={"model": "plain",
                                                                        **body})
    assert resp.status == 503, resp.text
    assert "nextn" in resp.json["error"]["message"]
