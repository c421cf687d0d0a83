"""Pool integrity and no silent downgrade (issue #35) through a real `hypnos serve` and the
official `ollama` client, offline (every pull finds its files already in models_dir):

- a pool change the next start would refuse is a 409 naming why, and nothing is saved (the
  bugs: removing a draft target, pulling an id that is an alias, were saved, and the next
  start refused its own config); the saved config always loads;
- two concurrent pulls of one id both succeed, and the model is there once (was a 500);
- /api/delete keeps a folder that holds another model's file (was removed: exact paths);
- an Ollama ``format`` the grammar cannot express is a 400 naming it (was any JSON object);
- /api/generate on a model without a chat template completes the prompt (was a 400).
"""
from __future__ import annotations

import asyncio
import json
import os

import httpx
import ollama
import pytest

from conftest import MODELS_DIR
from model_dirs import serve

from hypnos.service.config.load import load_config, overlay_path

SMOLLM2 = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma3-270m/gemma-3-270m-q4_k_m.gguf"         # a base model: no chat template
CONFIG = """
[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
aliases = ["qwen2.5-coder:0.5b"]
[[models]]
id = "spec"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
speculative = { draft = "smol" }
[[models]]
id = "base"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "gemma3-270m/gemma-3-270m-q4_k_m.gguf"
context_len = 1024
slots = 1
[[models]]
id = "inner"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "pack/inner.gguf"
[[models]]
id = "folder"
modality = "embeddings"
engine = "onnx_runtime"
weights_path = "pack"
"""
# ``not`` is a JSON schema keyword llama.cpp's grammar converter does not express.
NOT_EXPRESSIBLE = {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}


def _link(models, rel: str, source: str) -> None:
    src = MODELS_DIR / source
    if not src.exists():
        pytest.fail(f"{src} is missing: run `./run.sh models` first")
    (models / rel).parent.mkdir(parents=True, exist_ok=True)
    os.link(src, models / rel)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("safe-pool")
    models = tmp / "models"
    for rel, source in ((SMOLLM2, SMOLLM2), (GEMMA, GEMMA), ("pack/inner.gguf", SMOLLM2)):
        _link(models, rel, source)
    srv = serve(tmp, CONFIG, smol=True)
    srv.models, srv.config = models, tmp / "hypnos.toml"
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.base)


def _ids(server) -> list[str]:
    """The pool's model ids (aliases are listed too, as their own rows)."""
    return [m["id"] for m in server.get("/v1/models")["data"] if "alias_of" not in m]


def _overlay(server) -> str | None:
    path = overlay_path(server.config)
    return path.read_text() if path.exists() else None


def _loads_as_served(server) -> None:
    """The saved config (file + overlay) loads, and holds the pool being served."""
    cfg = load_config(server.config, env={})
    assert sorted(m.id for m in cfg.models) == sorted(_ids(server))


def test_removing_a_draft_target_is_409_naming_the_model_drafting_with_it(server):
    before = _overlay(server)
    for target in ("smol", "qwen2.5-coder:0.5b"):          # its id, and its alias
        r = httpx.delete(f"{server.base}/v1/models/{target}?drain_secs=0")
        assert r.status_code == 409, r.text
        error = r.json()["error"]
        assert error["type"] == "pool_conflict" and "'spec'" in error["message"]
    r = httpx.request("DELETE", server.base + "/api/delete", json={"model": "smol"})
    assert r.status_code == 409 and set(r.json()) == {"error"} and "'spec'" in r.json()["error"]
    assert "smol" in _ids(server) and (server.models / "smol.gguf").exists()
    assert _overlay(server) == before
    _loads_as_served(server)


def test_pulling_or_adding_an_alias_is_409_naming_its_owner(client, server):
    before = _overlay(server)
    with pytest.raises(ollama.ResponseError) as caught:
        client.pull("qwen2.5-coder:0.5b")
    assert caught.value.status_code == 409 and "'smol'" in str(caught.value.error)
    r = server.post("/v1/models", {"catalog": "qwen2.5-coder:0.5b"})
    assert r.status_code == 409 and "'smol'" in r.json()["error"]["message"]
    assert not (server.models / "qwen2.5-coder-0.5b").exists()     # nothing was fetched
    assert "qwen2.5-coder:0.5b" not in _ids(server) and _overlay(server) == before
    _loads_as_served(server)


def test_two_concurrent_pulls_of_one_id_both_succeed_and_add_it_once(server):
    async def pulls() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base, timeout=120) as http:
            return await asyncio.gather(
                http.post("/api/pull", json={"model": "smollm2:135m", "stream": False}),
                http.post("/api/pull", json={"model": "smollm2:135m"}))
    whole, streamed = asyncio.run(pulls())
    assert whole.status_code == 200 and whole.json() == {"status": "success"}
    lines = [json.loads(x) for x in streamed.text.splitlines()]
    assert streamed.status_code == 200 and lines[-1] == {"status": "success"}, lines
    assert _ids(server).count("smollm2:135m") == 1
    assert _overlay(server).count('id = "smollm2:135m"') == 1
    _loads_as_served(server)


def test_delete_keeps_a_folder_holding_another_models_file(client, server):
    assert client.delete("folder").status == "success"
    assert "folder" not in _ids(server) and "inner" in _ids(server)
    assert (server.models / "pack" / "inner.gguf").is_file()
    _loads_as_served(server)


def test_a_format_the_grammar_cannot_express_is_a_400_naming_format(client, server):
    for call in (lambda: client.chat(model="smol", format=NOT_EXPRESSIBLE,
                                     messages=[{"role": "user", "content": "hi"}]),
                 lambda: client.generate(model="smol", prompt="hi", format=NOT_EXPRESSIBLE),
                 lambda: client.generate(model="smol", prompt="hi", raw=True,
                                         format=NOT_EXPRESSIBLE)):
        with pytest.raises(ollama.ResponseError) as caught:
            call()
        assert caught.value.status_code == 400 and "'format'" in str(caught.value.error)
    assert "smol" not in {m.model for m in client.ps().models}     # refused before a load


def test_generate_on_a_model_without_a_template_completes_the_prompt(client):
    options, prompt = {"num_predict": 4, "temperature": 0}, "The capital of France is"
    r = client.generate(model="base", prompt=prompt, options=options)
    assert r.done and 0 < r.eval_count <= 4 and r.prompt_eval_count > 0
    assert r.response or r.done_reason == "length"
    parts = list(client.generate(model="base", prompt=prompt, stream=True, options=options))
    assert parts[-1].done and 0 < parts[-1].eval_count <= 4
    # A chat turn still needs a template: refused as before, naming /v1/completions.
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="base", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 400
