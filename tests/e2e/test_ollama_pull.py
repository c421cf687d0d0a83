"""Ollama's /api/pull and /api/delete through the official `ollama` client against a real
`hypnos serve` whose models_dir is a scratch folder: hard links to the shared model files
(so a delete there never touches the shared copies) and no network (HF_HUB_OFFLINE=1, and
every pull that succeeds finds its files already in place)."""
from __future__ import annotations

import os
import sys

import httpx
import ollama
import pytest

from conftest import MODELS_DIR, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

from hypnos.catalog.catalog import load_catalog  # noqa: E402

SMOLLM2 = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM = ("minilm-l6-v2/model.int8.onnx", "minilm-l6-v2/tokenizer.json")


def _link(models: os.PathLike, rel: str) -> None:
    src = MODELS_DIR / rel
    if not src.exists():
        pytest.fail(f"{src} is missing: run `./run.sh models` first")
    dest = models / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.link(src, dest)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ollama-pull")
    models = tmp / "models"
    for rel in (SMOLLM2, *MINILM):
        _link(models, rel)
    path = tmp / "hypnos.toml"
    path.write_text(f'models_dir = "{models}"\n[[models]]\nid = "minilm-l6-v2"\n'
                    'modality = "embeddings"\nengine = "onnx_runtime"\n'
                    f'weights_path = "{MINILM[0]}"\ntokenizer_path = "{MINILM[1]}"\n')
    srv = ServerProcess(path, tmp / "server.log", ready_timeout=120,
                        env={"HYPNOS_MODELS_DIR": os.fspath(models), "HF_HUB_OFFLINE": "1"})
    srv.models = models
    srv.config = path
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.base)


def _names(client) -> set[str]:
    return {m.model for m in client.list().models}


def test_pull_of_a_present_model_streams_progress_and_joins_the_pool(client, server):
    assert "smollm2:135m" not in _names(client)
    (f,) = load_catalog().resolve("smollm2:135m")[1].files
    lines = list(client.pull("smollm2:135m", stream=True))
    statuses = [p.status for p in lines]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    files = [p for p in lines if p.digest]
    assert files and all(p.digest == f"sha256:{f.sha256}" and p.total == f.size
                         for p in files)
    assert files[-1].completed == f.size and statuses[1] == f"pulling {f.sha256[:12]}"
    assert "smollm2:135m" in _names(client)
    assert "smollm2:135m" in (server.config.parent / "hypnos.models.toml").read_text()
    # Again, not streamed: only the closing line, and the pool is as it was.
    assert client.pull("smollm2:135m:latest").status == "success"
    assert sorted(_names(client)) == sorted({"smollm2:135m", "minilm-l6-v2"})


def test_pull_of_an_unknown_name_is_404_in_ollamas_envelope(client, server):
    with pytest.raises(ollama.ResponseError) as caught:
        client.pull("no-such-model:7b")
    assert caught.value.status_code == 404
    r = httpx.post(server.base + "/api/pull", json={"model": "no-such-model:7b"})
    assert r.status_code == 404 and set(r.json()) == {"error"}
    assert httpx.post(server.base + "/api/pull", json={}).status_code == 400


def test_a_pull_that_cannot_fetch_fails_with_an_error_line(client, server):
    """qwen3:4b (from the hub) is not in the scratch models_dir and the hub is off: the stream
    ends in an ``error`` line (the client raises), ``stream: false`` is a 500 naming the
    file, and nothing joins the pool."""
    with pytest.raises(ollama.ResponseError, match="cannot be reached"):
        list(client.pull("qwen3:4b", stream=True))
    r = httpx.post(server.base + "/api/pull", json={"model": "qwen3:4b", "stream": False},
                   timeout=60)
    assert r.status_code == 500 and "Qwen3-4B" in r.json()["error"]
    assert "qwen3:4b" not in _names(client)
    assert not (server.models / "qwen3-4b").exists()


def test_delete_removes_the_model_and_only_its_files(client, server):
    assert client.delete("smollm2:135m").status == "success"
    assert not (server.models / SMOLLM2).exists() and (MODELS_DIR / SMOLLM2).exists()
    assert not (server.models / "smollm2-135m").exists()      # the emptied folder goes too
    assert client.delete("minilm-l6-v2").status == "success"
    assert not any((server.models / rel).exists() for rel in MINILM)
    assert _names(client) == set()
    with pytest.raises(ollama.ResponseError) as caught:
        client.delete("smollm2:135m")
    assert caught.value.status_code == 404
    r = httpx.request("DELETE", server.base + "/api/delete", json={"model": "smollm2:135m"})
    assert r.status_code == 404 and set(r.json()) == {"error"}
