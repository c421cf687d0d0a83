"""The request log by key (issue #35: any key could raise the level to trace and read every
key's prompts): the level and clearing are the admin's, a user key reads only its own
records, another key's record is the same 404 as an unknown id, the admin reads all."""
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio
CONFIG = f"""
models_dir = "{MODELS_DIR}"
[server]
api_keys = ["root-key"]
[server.request_log]
level = "info"
[[server.keys]]
key = "alice-key"
label = "alice"
[[server.keys]]
key = "bob-key"
label = "bob"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
"""


async def call(app, method, path, key, **kw):
    _req, resp = await getattr(app.asgi_client, method)(
        path, headers={"authorization": f"Bearer {key}"}, **kw)
    return resp


async def logged_prompt(app, key, secret) -> str:
    """A request the log keeps (a chat for a model that does not exist: a 404, no model
    loaded) whose prompt is ``secret``; its request id."""
    resp = await call(app, "post", "/v1/chat/completions", key, json={
        "model": "no-such-model", "messages": [{"role": "user", "content": secret}]})
    assert resp.status == 404, resp.text
    return resp.headers["x-request-id"]


async def listed(app, key, query="") -> dict:
    resp = await call(app, "get", "/v1/logs" + query, key)
    assert resp.status == 200, resp.text
    return resp.json


async def test_each_key_reads_its_own_records_and_only_the_admin_changes_the_log():
    app = create_app(parse_config(tomllib.loads(CONFIG)), catalog=load_catalog(), stage=False)
    # Bob may neither raise the level nor clear the log.
    resp = await call(app, "post", "/v1/logs/level", "bob-key", json={"level": "trace"})
    assert resp.status == 403 and resp.json["error"]["type"] == "permission_denied"
    assert (await listed(app, "root-key"))["level"] == "info"
    resp = await call(app, "post", "/v1/logs/level", "root-key", json={"level": "trace"})
    assert resp.status == 200 and resp.json == {"level": "trace"}

    alice = [await logged_prompt(app, "alice-key", "alice-secret-1"),
             await logged_prompt(app, "alice-key", "alice-secret-2")]
    bob = await logged_prompt(app, "bob-key", "bob-secret")
    resp = await call(app, "delete", "/v1/logs", "bob-key")
    assert resp.status == 403 and resp.json["error"]["type"] == "permission_denied"

    # Bob's view: his record only, at trace level, and not one byte of alice's prompts.
    mine = await listed(app, "bob-key")
    assert [r["id"] for r in mine["records"]] == [bob] and mine["stored"] == 1
    assert mine["records"][0]["key"] == "bob" and "bob-secret" in mine["records"][0]["input"]
    assert "alice-secret" not in str(mine)
    assert (await listed(app, "bob-key", "?key=alice"))["records"] == []
    # Alice's record by id is, byte for byte, the 404 of an id that was never logged.
    theirs = await call(app, "get", f"/v1/logs/{alice[0]}", "bob-key")
    unknown = await call(app, "get", f"/v1/logs/{alice[0][:-4]}beef", "bob-key")
    assert theirs.status == unknown.status == 404
    assert theirs.body.replace(alice[0].encode(), b"") == \
        unknown.body.replace(f"{alice[0][:-4]}beef".encode(), b"")
    assert b"alice-secret" not in theirs.body

    # Alice sees hers, the admin sees all three (and filters by label); the records name
    # the key by its label, never the key or its owner id.
    assert {r["id"] for r in (await listed(app, "alice-key"))["records"]} == set(alice)
    assert (await call(app, "get", f"/v1/logs/{alice[1]}", "alice-key")).status == 200
    every = await listed(app, "root-key")
    assert {r["id"] for r in every["records"]} == {*alice, bob} and every["stored"] == 3
    assert {r["id"] for r in (await listed(app, "root-key", "?key=alice"))["records"]} == \
        set(alice)
    assert "alice-key" not in str(every) and "owner" not in every["records"][0]
    assert (await call(app, "get", f"/v1/logs/{bob}", "root-key")).json["key"] == "bob"

    # The admin clears it for everyone; alice's id is now unknown to all, and bob's 404 for
    # it is the same bytes as while it was hers.
    resp = await call(app, "delete", "/v1/logs", "root-key")
    assert resp.status == 200 and (await listed(app, "root-key"))["records"] == []
    gone = await call(app, "get", f"/v1/logs/{alice[0]}", "bob-key")
    assert gone.status == 404 and gone.body == theirs.body
