"""The request log (spec section 15) through the ASGI app, on the real SmolLM2 model: what a
record holds, filters, levels, redaction, capacity, and that polling is not logged."""
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import ConfigError, parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"


def make_app(server: str = ""):
    require_smollm2()
    text = (f'models_dir = "{MODELS_DIR}"\n{server}\n[[models]]\nid = "chat"\n'
            f'modality = "text_generation"\nengine = "ggml_llama"\nweights_path = "{GGUF}"\n'
            "context_len = 2048\n")
    return create_app(parse_config(tomllib.loads(text)), catalog=load_catalog(), stage=False)


async def call(app, method, path, **kw):
    _req, resp = await getattr(app.asgi_client, method)(path, **kw)
    return resp


def chat_body(content="Say hi", **extra):
    return {"model": "chat", "max_tokens": 3, "temperature": 0,
            "messages": [{"role": "user", "content": content}], **extra}


async def logs(app, query=""):
    resp = await call(app, "get", "/v1/logs" + query)
    assert resp.status == 200, resp.text
    return resp.json


async def test_a_chat_record_and_polling_not_logged():
    app = make_app()
    resp = await call(app, "post", "/v1/chat/completions", json=chat_body())
    assert resp.status == 200
    rid = resp.headers["x-request-id"]
    await call(app, "get", "/v1/models")
    await call(app, "get", "/v1/memory/status")
    body = await logs(app)
    assert body["level"] == "info" and body["capacity"] == 200 and body["stored"] == 1
    (rec,) = body["records"]
    assert rec["id"] == rid and rec["route"] == "/v1/chat/completions"
    assert rec["method"] == "POST" and rec["status"] == 200 and rec["model"] == "chat"
    assert rec["stream"] is False and rec["level"] == "info" and rec["error"] is None
    assert rec["tokens_in"] == resp.json["usage"]["prompt_tokens"]
    assert rec["tokens_out"] == resp.json["usage"]["completion_tokens"]
    tele = resp.json["hypnos_telemetry"]
    assert rec["previous_tier"] == "tier3_nvme_ssd" == tele["previous_tier"]
    assert rec["tier_switch_ms"] == tele["tier_switch_latency_ms"] > 0
    assert rec["inference_ms"] == tele["inference_latency_ms"]
    assert rec["duration_ms"] >= rec["inference_ms"] and rec["started_at"].endswith("Z")
    assert "input" not in rec and "request_payload" not in rec      # info captures no text
    assert (await call(app, "get", f"/v1/logs/{rid}")).json == rec
    missing = await call(app, "get", "/v1/logs/req-nope")
    assert missing.status == 404 and missing.json["error"]["type"] == "not_found"

    stream = await call(app, "post", "/v1/chat/completions", json=chat_body(stream=True))
    assert stream.status == 200
    rec = (await logs(app, "?limit=1"))["records"][0]
    assert rec["stream"] is True and rec["tokens_out"] >= 1 and rec["status"] == 200


async def test_filters_and_clearing():
    app = make_app('[server]\napi_keys = ["k"]\n[[server.keys]]\nkey = "u"\nlabel = "ui"\n')
    auth = {"authorization": "Bearer u"}
    await call(app, "post", "/v1/chat/completions", json=chat_body(), headers=auth)
    await call(app, "post", "/v1/chat/completions", json={**chat_body(), "model": "nope"},
               headers=auth)
    admin = {"authorization": "Bearer k"}
    await call(app, "post", "/v1/memory/tier", json={"model": "chat", "target_tier": "tier9"},
               headers=admin)

    async def q(query):                 # the admin reads every key's records
        return await call(app, "get", "/v1/logs" + query, headers=admin)

    everything = (await q("")).json["records"]
    assert [r["status"] for r in everything] == [400, 404, 200]          # newest first
    own = (await call(app, "get", "/v1/logs", headers=auth)).json["records"]
    assert [r["status"] for r in own] == [404, 200]     # a user key reads its own only
    assert [r["status"] for r in (await q("?status=ok")).json["records"]] == [200]
    assert [r["status"] for r in (await q("?status=4xx")).json["records"]] == [400, 404]
    assert (await q("?status=5xx")).json["records"] == []
    assert [r["status"] for r in (await q("?status=error")).json["records"]] == [400, 404]
    assert [r["model"] for r in (await q("?model=nope")).json["records"]] == ["nope"]
    assert [r["route"] for r in (await q("?route=/v1/memory/tier")).json["records"]] == [
        "/v1/memory/tier"]
    ui = (await q("?key=ui")).json["records"]
    assert len(ui) == 2 and all(r["key"] == "ui" for r in ui)
    not_found = everything[1]
    assert not_found["level"] == "warn" and "nope" in not_found["error"]
    assert len((await q("?limit=2")).json["records"]) == 2
    for bad in ("?status=teapot", "?limit=0", "?limit=x"):
        resp = await q(bad)
        assert resp.status == 400 and resp.json["error"]["type"] == "invalid_request_error"
    assert (await call(app, "delete", "/v1/logs", headers=auth)).status == 403   # admin only
    assert (await call(app, "delete", "/v1/logs", headers=admin)).json == {"cleared": True}
    assert (await q("")).json["stored"] == 0


async def test_levels_capture_text_and_redact():
    app = make_app('[server.request_log]\nredact = ["secret\\\\d+"]\ncapacity = 3\n')
    assert (await call(app, "post", "/v1/logs/level", json={"level": "debug"})).json == {
        "level": "debug"}
    await call(app, "post", "/v1/chat/completions", json=chat_body("my secret42 is safe"))
    rec = (await logs(app))["records"][0]
    assert "[redacted]" in rec["input"] and "secret42" not in rec["input"]
    assert "safe" in rec["input"] and isinstance(rec["output"], str)
    assert "request_payload" not in rec
    await call(app, "post", "/v1/logs/level", json={"level": "trace"})
    resp = await call(app, "post", "/v1/chat/completions", json=chat_body("secret7"))
    rec = (await logs(app))["records"][0]
    assert "secret7" not in rec["request_payload"] and "[redacted]" in rec["request_payload"]
    assert resp.json["id"] in rec["response_payload"]
    await call(app, "post", "/v1/logs/level", json={"level": "error"})
    await call(app, "post", "/v1/chat/completions", json={**chat_body(), "model": "nope"})
    assert (await logs(app))["stored"] == 2                  # a 404 is below "error"
    await call(app, "post", "/v1/logs/level", json={"level": "info"})
    for _ in range(2):
        await call(app, "post", "/v1/chat/completions", json={**chat_body(), "model": "nope"})
    assert (await logs(app))["stored"] == 3                  # the ring keeps `capacity`
    await call(app, "post", "/v1/logs/level", json={"level": "off"})
    await call(app, "post", "/v1/chat/completions", json={**chat_body(), "model": "nope"})
    body = await logs(app)
    assert body["level"] == "off" and body["stored"] == 3
    resp = await call(app, "post", "/v1/logs/level", json={"level": "loud"})
    assert resp.status == 400 and resp.json["error"]["type"] == "invalid_request_error"


async def test_redact_star_blanks_everything():
    app = make_app('[server.request_log]\nredact = ["*"]\nlevel = "trace"\n')
    await call(app, "post", "/v1/chat/completions", json=chat_body("hello"))
    rec = (await logs(app))["records"][0]
    assert rec["input"] == "" and rec["output"] == "" and rec["request_payload"] == ""


def test_a_bad_redact_pattern_names_its_key():
    with pytest.raises(ConfigError, match=r"server.request_log.redact\[0\]"):
        parse_config({"server": {"request_log": {"redact": ["("]}}})
