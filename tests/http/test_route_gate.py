"""The route gate (service/http/layers.route_gate), walked over every route of the app: each
route whose ``@endpoint`` needs a READY server answers 503 + Retry-After, in its dialect's
envelope, while startup staging runs and while a SIGTERM drain runs; every other route is in
EXEMPT below, by hand, so a new route has to pick a side. Also: an admin route says 403 to a
plain key before it says 503, the document lists what the gate answers, and the app's state
takes no attribute it does not declare."""
import re
import threading

import pytest
from sanic import Sanic

from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.errors import STAGING_MESSAGE
from hypnos.service.http.openapi import endpoint_of
from hypnos.service.scheduling.readiness import Readiness
from hypnos.service.state import AppState, state
from test_http import app_for, call, config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

# Routes that answer whatever the readiness: probes, listings, documents, logs, and the calls
# that change nothing a staging or draining server needs (they lease no model).
EXEMPT = {
    ("GET", "/"), ("GET", "/playground/<name:str>"), ("GET", "/openapi.json"),
    ("GET", "/health"), ("GET", "/ready"), ("GET", "/metrics"),
    ("GET", "/v1/models"), ("GET", "/v1/models/<model_id:str>"), ("GET", "/v1/models/catalog"),
    ("POST", "/v1/advisor"),
    ("GET", "/v1/memory/status"), ("GET", "/v1/memory/kv-park"), ("POST", "/v1/memory/kv-park"),
    ("GET", "/v1/logs"), ("DELETE", "/v1/logs"), ("GET", "/v1/logs/<request_id:str>"),
    ("POST", "/v1/logs/level"),
    ("GET", "/v1/sessions/estimate"), ("POST", "/v1/sessions/release"),
    ("GET", "/v1/responses/<response_id:str>"), ("DELETE", "/v1/responses/<response_id:str>"),
    ("GET", "/v1/responses/<response_id:str>/input_items"),
    ("DELETE", "/v1/documents/<doc_id:str>"), ("GET", "/v1/documents/<doc_id:str>/pictures"),
    ("GET", "/v1/documents/<doc_id:str>/pictures/<index:int>"),
    ("GET", "/api/tags"), ("GET", "/api/ps"), ("GET", "/api/version"), ("POST", "/api/show"),
}
DRAINING_MESSAGE = "shutting down"


def routes(app):
    """(method, declared path, a path to call, its Endpoint) for every route."""
    for r in app.router.routes:
        declared = "/" + r.path
        concrete = re.sub(r"<\w+:int>", "1", declared)
        concrete = re.sub(r"<\w+(:\w+)?>", "chat", concrete)
        for method in r.methods:
            yield method, declared, concrete, endpoint_of(r.handler)


def gated(app):
    return [(m, d, c) for m, d, c, spec in routes(app) if (m, d) not in EXEMPT]


def refusal_message(resp, path: str) -> str:
    """The message of the gate's 503, after checking its status, header and envelope."""
    assert resp.status == 503, (path, resp.status, resp.text)
    assert resp.headers["retry-after"] == "5", path
    body = resp.json
    if path.startswith("/api/"):                           # Ollama's envelope
        assert set(body) == {"error"} and isinstance(body["error"], str), path
        return body["error"]
    if path.startswith("/v1/messages"):                    # Anthropic's
        assert body["type"] == "error" and body["error"]["type"] == "overloaded_error", path
        return body["error"]["message"]
    assert body["error"]["type"] == "model_not_available", path
    return body["error"]["message"]


async def request(app, method: str, path: str):
    kw = {"json": {}} if method in ("POST", "PUT") else {}
    return await call(app, method.lower(), path, **kw)


async def test_every_route_is_gated_or_listed_exempt():
    app = app_for()
    declared = {(m, d) for m, d, _c, _s in routes(app)}
    assert declared >= EXEMPT, EXEMPT - declared                 # no stale entry
    for method, path, _c, spec in routes(app):
        assert spec is not None, (method, path)
        assert spec.needs_ready is ((method, path) not in EXEMPT), (method, path)
    assert ("GET", "/v1/sessions/watch") not in EXEMPT           # it takes a hold


async def test_gated_routes_refuse_while_staging():
    gate = threading.Event()
    app = create_app(config(), catalog=load_catalog(), before_stage=gate.wait)
    try:
        assert state(app).lifecycle.readiness is Readiness.STARTING
        for method, _declared, path in gated(app):
            resp = await request(app, method, path)
            assert refusal_message(resp, path) == STAGING_MESSAGE, (method, path)
    finally:
        gate.set()


async def test_gated_routes_refuse_while_draining_and_exempt_ones_answer():
    app = app_for()
    assert state(app).lifecycle.drain() is True
    for method, _declared, path in gated(app):
        resp = await request(app, method, path)
        assert DRAINING_MESSAGE in refusal_message(resp, path), (method, path)
    for method, declared, path, _s in routes(app):
        if (method, declared) not in EXEMPT:
            continue
        resp = await request(app, method, path)
        body = resp.json if resp.content_type.startswith("application/json") else {}
        err = body.get("error") if isinstance(body, dict) else None
        message = err if isinstance(err, str) else (err or {}).get("message", "")
        assert DRAINING_MESSAGE not in message, (method, path, resp.text)
    resp = await call(app, "get", "/ready")
    assert resp.status == 503 and resp.json == {"ready": False, "reason": "shutting down"}


async def test_admin_key_checked_before_readiness():
    keys = '[server]\napi_keys = ["root-key"]\n[[server.keys]]\nkey = "user-key"\n'
    gate = threading.Event()
    app = create_app(config(keys), catalog=load_catalog(), before_stage=gate.wait)
    try:
        for method, path in (("post", "/v1/models"), ("delete", "/v1/models/chat")):
            user = await call(app, method, path, headers={"authorization": "Bearer user-key"})
            assert user.status == 403 and user.json["error"]["type"] == "permission_denied"
            root = await call(app, method, path, headers={"authorization": "Bearer root-key"})
            assert refusal_message(root, path) == STAGING_MESSAGE
    finally:
        gate.set()


async def test_document_lists_the_gates_statuses():
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    for method, declared, _c, spec in routes(app):
        documented = re.sub(r"<(\w+)(:\w+)?>", r"{\1}", declared)
        responses = doc["paths"][documented][method.lower()]["responses"]
        if spec.needs_ready:
            assert "503" in responses, (method, declared)
        if spec.admin:
            assert "403" in responses, (method, declared)


async def test_app_state_takes_no_stray_attribute():
    app = app_for()
    assert isinstance(app.ctx, AppState) and state(app) is app.ctx
    with pytest.raises(AttributeError):
        app.ctx.ready = True


async def test_a_user_key_cannot_resize_the_shared_prompt_cache():
    """POST /v1/memory/kv-park sets the prompt cache's RAM cap, which every key's cached
    prefixes share: a user key gets 403 (it could otherwise evict the others' entries with
    max_bytes 0); the admin key changes it; reading it stays open to both."""
    keys = '[server]\napi_keys = ["root-key"]\n[[server.keys]]\nkey = "user-key"\n'
    app = create_app(config(keys), catalog=load_catalog(), stage=False)
    body = {"max_bytes": 0}
    user = await call(app, "post", "/v1/memory/kv-park", json=body,
                      headers={"authorization": "Bearer user-key"})
    assert user.status == 403 and user.json["error"]["type"] == "permission_denied"
    root = await call(app, "post", "/v1/memory/kv-park", json=body,
                      headers={"authorization": "Bearer root-key"})
    assert root.status == 200 and root.json["max_bytes"] == 0
    seen = await call(app, "get", "/v1/memory/kv-park",
                      headers={"authorization": "Bearer user-key"})
    assert seen.status == 200


async def test_a_user_key_cannot_move_a_model_between_tiers():
    """POST /v1/memory/tier evicts what every key shares (a demotion drops a model others
    use, a promotion pushes others out of VRAM): a user key gets 403 and nothing moves;
    the admin key moves it."""
    keys = '[server]\napi_keys = ["root-key"]\n[[server.keys]]\nkey = "user-key"\n'
    app = create_app(config(keys), catalog=load_catalog(), stage=False)
    body = {"model": "chat", "target_tier": "tier3_nvme_ssd"}
    user = await call(app, "post", "/v1/memory/tier", json=body,
                      headers={"authorization": "Bearer user-key"})
    assert user.status == 403 and user.json["error"]["type"] == "permission_denied"
    root = await call(app, "post", "/v1/memory/tier", json=body,
                      headers={"authorization": "Bearer root-key"})
    assert root.status == 200 and root.json["current_tier"] == "tier3_nvme_ssd"
