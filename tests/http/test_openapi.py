"""GET /openapi.json: built from the routes' own declarations (service/http/openapi.py), it covers
every registered route, is a valid OpenAPI 3.1 document, and the schemas it publishes are the
ones the routes enforce."""
import re

import pytest
from sanic import Sanic

from test_http import app_for, assert_envelope, call

Sanic.test_mode = True
pytestmark = pytest.mark.anyio


def sanic_routes(app) -> set[tuple[str, str]]:
    app.router.finalize() if not app.router.finalized else None
    out = set()
    for route in app.router.routes:
        path = "/" + re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", route.path).lstrip("/")
        out |= {(path, m.lower()) for m in route.methods - {"HEAD", "OPTIONS"}}
    return out


async def test_every_registered_route_is_in_the_document():
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    missing = sanic_routes(app) - documented
    assert not missing, f"routes without @endpoint (service/http/openapi.py): {sorted(missing)}"
    assert documented == sanic_routes(app)
    assert ("/openapi.json", "get") in documented and len(documented) >= 20


async def test_the_document_is_valid_openapi_3_1():
    from jsonschema import Draft202012Validator
    from openapi_spec_validator import validate
    doc = (await call(app_for(), "get", "/openapi.json")).json
    assert doc["openapi"].startswith("3.1")
    validate(doc)
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for content in op.get("requestBody", {}).get("content", {}).values():
                Draft202012Validator.check_schema(content["schema"])
            assert op["responses"], (path, method)


async def test_errors_are_documented_with_the_envelope():
    doc = (await call(app_for(), "get", "/openapi.json")).json
    chat = doc["paths"]["/v1/chat/completions"]["post"]
    for status in ("400", "401", "404", "422", "429", "503", "507"):
        schema = chat["responses"][status]["content"]["application/json"]["schema"]
        assert schema["properties"]["error"]["required"] == ["message", "type"]
    assert "text/plain" in chat["responses"]["413"]["content"]
    upload = doc["paths"]["/v1/audio/transcriptions"]["post"]
    assert "application/json" in upload["responses"]["413"]["content"]
    assert "multipart/form-data" in upload["requestBody"]["content"]


async def test_the_published_schema_is_the_one_enforced():
    """A body the chat schema refuses is refused by the route with the same field named; the
    published range of max_tokens is the enforced one."""
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    props = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]["properties"]
    low = props["max_tokens"]["minimum"]
    body = {"model": "chat", "messages": [{"role": "user", "content": "x"}]}
    resp = await call(app, "post", "/v1/chat/completions", json={**body, "max_tokens": low - 1})
    assert "max_tokens" in assert_envelope(resp, 400, "invalid_request_error")["message"]
    assert props["reasoning_effort"]["enum"][:-1]           # the parser's efforts, then null
    resp = await call(app, "post", "/v1/chat/completions",
                      json={**body, "reasoning_effort": "galactic"})
    assert_envelope(resp, 400, "invalid_request_error")
    # null counts as absent, as the document says (optional properties are nullable)
    assert "null" in props["temperature"]["type"]
    resp = await call(app, "post", "/v1/chat/completions", json={**body, "model": "nope",
                                                                  "temperature": None})
    assert_envelope(resp, 404, "model_not_found")


@pytest.mark.parametrize("path,body,field", [
    ("/v1/embeddings", {"model": "m", "input": 5}, "input"),
    ("/v1/embeddings", {"input": "x"}, "model"),
    ("/v1/audio/speech", {"model": "k", "input": "hi", "speed": 99}, "speed"),
    ("/v1/memory/tier", {"model": "chat", "target_tier": "tier9"}, "target_tier"),
    ("/v1/advisor", {"needs": "chat"}, "needs"),
    ("/v1/completions", {"model": "chat", "prompt": ["a", "b"]}, "prompt"),
    ("/v1/chat/completions", {"model": "chat", "messages": [{"role": "user", "content": [
        {"type": "video"}]}]}, "messages"),
])
async def test_schema_refusals_name_the_field(path, body, field):
    resp = await call(app_for(), "post", path, json=body)
    err = assert_envelope(resp, 400, "invalid_request_error")
    assert field in err["message"] and err["param"] == field


async def test_responses_match_their_documented_schemas():
    """Success bodies and the /ready 503 (not the envelope) against the document, through
    jsonschema: the document describes what the routes really send."""
    import threading

    from jsonschema import validate

    from hypnos.catalog.catalog import load_catalog
    from hypnos.service.app import create_app
    from test_http import config

    def schema(doc, path, status, method="get"):
        return doc["paths"][path][method]["responses"][str(status)]["content"][
            "application/json"]["schema"]
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    for path in ("/health", "/ready", "/v1/models"):
        resp = await call(app, "get", path)
        assert resp.status == 200
        validate(resp.json, schema(doc, path, 200))
    resp = await call(app, "post", "/v1/chat/completions", json={"model": "nope",
                                                                  "messages": []})
    validate(resp.json, schema(doc, "/v1/chat/completions", resp.status, "post"))
    gate = threading.Event()
    staging = create_app(config(), catalog=load_catalog(), before_stage=gate.wait)
    try:
        resp = await call(staging, "get", "/ready")
        assert resp.status == 503
        validate(resp.json, schema(doc, "/ready", 503))
    finally:
        gate.set()


async def test_each_status_is_the_one_the_route_answers():
    """The pool's statuses as section 6 has them: POST /v1/models answers 201 (documented as
    such, not 200); enable and disable need no admin key, so their 403 is only the browser
    refusal every route has; a pool change loads
    nothing, so no 422; a 422 is "prompt past the context window" only where a prompt is
    counted (moe-offload's is an unknown mode)."""
    doc = (await call(app_for(), "get", "/openapi.json")).json
    ops = {(path, method): op for path, by in doc["paths"].items() for method, op in by.items()}
    add = ops[("/v1/models", "post")]["responses"]
    assert [s for s in add if s.startswith("2")] == ["201"]
    for action in ("enable", "disable"):
        responses = ops[(f"/v1/models/{{model_id}}/{action}", "post")]["responses"]
        assert "admin" not in responses["403"]["description"], action
        assert {"404", "503"} <= set(responses), action
    for method in ("put", "delete"):
        responses = ops[("/v1/models/{model_id}", method)]["responses"]
        assert "403" in responses and "422" not in responses, method
    for (path, method), op in ops.items():
        meaning = op["responses"].get("422", {}).get("description", "")
        assert not (path.startswith("/v1/models") and "prompt" in meaning), (path, method)
    chat = ops[("/v1/chat/completions", "post")]["responses"]["422"]
    assert chat["description"] == "prompt past the context window"
    moe = ops[("/v1/models/{model_id}/moe-offload", "post")]["responses"]["422"]
    assert "mode" in moe["description"]


async def test_a_machine_too_small_for_a_need_is_the_documented_400():
    """No schema can state the smallest machine for a set of needs (it depends on the
    catalog), so the document says what its 400 also means, and the fuzzer's config
    (bench/schemathesis.toml) lets a schema-valid body get it on this route only."""
    import tomllib
    from conftest import ROOT
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    meaning = doc["paths"]["/v1/advisor"]["post"]["responses"]["400"]["description"]
    assert "no lineup fits" in meaning
    resp = await call(app, "post", "/v1/advisor", json={"needs": ["chat"], "vram_bytes": 1,
                                                         "ram_bytes": 1})
    err = assert_envelope(resp, 400, "invalid_request_error")
    assert "fit" in err["message"], err
    fuzz = tomllib.loads((ROOT / "bench" / "schemathesis.toml").read_text())
    advisor = [op for op in fuzz["operations"] if op["include-path"] == "/v1/advisor"]
    assert advisor and "400" in advisor[0]["checks"]["positive_data_acceptance"][
        "expected-statuses"]
