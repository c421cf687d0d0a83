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
