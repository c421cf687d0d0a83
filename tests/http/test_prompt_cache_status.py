"""The prompt cache in /v1/memory/status and /metrics: totals per model and tier for every
key, each entry (partition, session) only for a key that sees all."""
import tomllib

import pytest
from sanic import Sanic

from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

CONFIG = """
[server]
api_keys = ["root-key"]
[[server.keys]]
key = "alice-key"
label = "alice"
[hardware]
prompt_cache_ram_bytes = 1048576
"""


def make_app(tmp_path):
    path = tmp_path / "hypnos.toml"
    path.write_text(CONFIG)
    return create_app(parse_config(tomllib.loads(CONFIG), source=path),
                      catalog=load_catalog(), stage=False)


async def get(app, route, key):
    _req, resp = await app.asgi_client.get(route, headers={"authorization": f"Bearer {key}"})
    assert resp.status == 200
    return resp


async def test_status_and_metrics_report_the_cache(tmp_path):
    app = make_app(tmp_path)
    cache = app.ctx.scheduler.prompt_cache
    assert cache.ram_cap == 1 << 20
    assert cache.folder == tmp_path / "hypnos-state" / "prompt-cache"
    cache.attach("chat", "ident")
    cache.put("chat", "ident", "someone-else", list(range(300)), bytearray(4096), [],
              "someone-else:conv")
    cache.flush()
    admin = (await get(app, "/v1/memory/status", "root-key")).json["prompt_cache"]
    user = (await get(app, "/v1/memory/status", "alice-key")).json["prompt_cache"]
    for body in (admin, user):
        assert body["entries"] == 1 and body["ram_bytes"] == 4096
        row = body["models"][0]
        assert row["model"] == "chat" and row["ram"]["entries"] == row["disk"]["entries"] == 1
    assert admin["items"][0]["partition"] == "someone-else"
    assert "items" not in user and "someone-else" not in str(user)
    text = (await get(app, "/metrics", "root-key")).text
    assert 'hypnos_prompt_cache_entries{model="chat",tier="ram"} 1.0' in text
    assert 'hypnos_prompt_cache_bytes{model="chat",tier="ram"} 4096.0' in text
    cache.close()


async def test_releasing_a_session_and_deleting_a_response_drop_their_entries(tmp_path):
    from hypnos.service.inference.stored_responses import SESSION_PREFIX, StoredResponse
    from conftest import MODELS_DIR
    text = (f'models_dir = "{MODELS_DIR}"\n[[models]]\nid = "chat"\n'
            'modality = "text_generation"\nengine = "ggml_llama"\n'
            'weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"\n')
    path = tmp_path / "hypnos.toml"
    path.write_text(text)
    app = create_app(parse_config(tomllib.loads(text), source=path), catalog=load_catalog(),
                     stage=False)
    cache = app.ctx.scheduler.prompt_cache
    cache.attach("chat", "ident")
    for i, session in enumerate(["conv-a", "conv-b", None]):
        cache.put("chat", "ident", "", list(range(1000 * i, 1000 * i + 300)),
                  bytearray(4096), [], session)
    _req, resp = await app.asgi_client.post("/v1/sessions/release", json={
        "model": "chat", "session_id": "conv-a"})
    assert resp.status == 200, resp.text
    assert sorted(str(e.session) for e in cache.entries) == ["None", "conv-b"]
    # A stored response's conversation (its session key: the prefix and its first id).
    app.ctx.responses.put(StoredResponse("resp_x", "", "chat", "resp_x", None, [],
                                         {"id": "resp_x"}))
    cache.put("chat", "ident", "", list(range(9000, 9300)), bytearray(4096), [],
              SESSION_PREFIX + "resp_x")
    _req, resp = await app.asgi_client.delete("/v1/responses/resp_x")
    assert resp.status == 200, resp.text
    assert sorted(str(e.session) for e in cache.entries) == ["None", "conv-b"]
    cache.close()
