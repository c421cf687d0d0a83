"""HTTP behaviour through Sanic's ASGI client: request ids, CORS, keys, staging, limits and
the error envelope on every route."""
import re
import threading

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, fresh_state_dir
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

CONFIG = """
models_dir = "{models}"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
[[models]]
id = "missing"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "nowhere/missing.gguf"
[[models]]
id = "off"
modality = "embeddings"
engine = "onnx_runtime"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
enabled = false
"""


def config(extra: str = "", **limits):
    import tomllib
    top, _, rest = CONFIG.format(models=MODELS_DIR).partition("[[models]]")
    data = tomllib.loads(top + extra + "\n[[models]]" + rest)
    cfg = parse_config(data)
    for k, v in limits.items():
        setattr(cfg.limits, k, v)
    return cfg


def app_for(cfg=None, **kw):
    """The app for ``cfg``, with its own state_dir unless ``cfg`` names one."""
    cfg = cfg or config()
    if not cfg.server.state_dir:
        cfg.server.state_dir = fresh_state_dir()
    return create_app(cfg, catalog=load_catalog(), stage=False, **kw)


async def call(app, method, path, **kw):
    _req, resp = await getattr(app.asgi_client, method)(path, **kw)
    return resp


def assert_envelope(resp, status, type_):
    assert resp.status == status, resp.text
    err = resp.json["error"]
    assert err["type"] == type_ and isinstance(err["message"], str) and err["message"]
    return err


async def test_health_ready_and_request_id():
    app = app_for()
    resp = await call(app, "get", "/health")
    assert resp.status == 200 and resp.json["status"] == "ok" and resp.json["service"] == "hypnos"
    assert re.fullmatch(r"req-[0-9a-f]{32}", resp.headers["x-request-id"])
    assert (await call(app, "get", "/ready")).json == {"ready": True}


async def test_staging_gates_inference_but_not_listing():
    gate = threading.Event()
    app = create_app(config(), catalog=load_catalog(), before_stage=gate.wait)
    try:
        resp = await call(app, "get", "/ready")
        assert resp.status == 503 and resp.json["ready"] is False
        resp = await call(app, "post", "/v1/chat/completions",
                          json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
        assert_envelope(resp, 503, "model_not_available")
        assert resp.headers["retry-after"] == "5"
        assert (await call(app, "get", "/v1/models")).status == 200
        assert (await call(app, "get", "/v1/memory/status")).status == 200
    finally:
        gate.set()


PREPARED = """
models_dir = "{models}"
[[models]]
id = "docs"
modality = "document_conversion"
engine = "docling"
[[models]]
id = "docs-2"
modality = "document_conversion"
engine = "docling"
[[models]]
id = "broken"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "nowhere/missing.gguf"
[[models]]
id = "off"
modality = "embeddings"
engine = "onnx_runtime"
weights_path = "nowhere/model.onnx"
enabled = false
"""


async def test_staging_prepares_each_engine_once_in_a_thread_before_ready(tmp_path):
    """Regression: a docling model left on disk imported docling on its first request, and
    although the load ran in a worker thread the import held the GIL in long stretches: the
    event loop went 0.4-0.6 s without answering /health. Staging now prepares the engines
    (``Effects.prepare``) first: once per engine kind an enabled model without a problem
    uses, off the event loop, while /ready still says no (after it, beside requests, a
    load importing the same libraries hung)."""
    import tomllib

    from fakes import FakeEffects
    from hypnos.service.lifecycle.staging import stage_models
    from hypnos.service.state import state

    class Watched(FakeEffects):
        def prepare(self, st) -> bool:
            self.ready_then.append(state(app).lifecycle.ready)
            return super().prepare(st)

    fx = Watched()
    fx.ready_then = []
    cfg = parse_config(tomllib.loads(PREPARED.format(models=tmp_path)))
    cfg.server.state_dir = fresh_state_dir()
    app = create_app(cfg, catalog=load_catalog(), effects=fx)
    await stage_models(app)
    assert [mid for mid, _thread in fx.prepared] == ["docs"]
    assert fx.prepared[0][1] != threading.get_ident() and fx.ready_then == [False]
    assert state(app).lifecycle.ready


async def test_models_list_hides_disabled():
    resp = await call(app_for(), "get", "/v1/models")
    ids = [m["id"] for m in resp.json["data"]]
    assert ids == ["chat", "missing"]
    m = resp.json["data"][0]
    assert m["object"] == "model" and m["modality"] == "text_generation"
    assert m["current_tier"] == "tier3_nvme_ssd" and m["active_leases"] == 0
    assert set(m["placement"]) >= {"primary_tier", "gpu_layers", "allocated_context_len"}


async def test_unknown_route_is_an_openai_shaped_404():
    app = app_for()
    assert_envelope(await call(app, "get", "/v1/nope"), 404, "not_found")


@pytest.mark.parametrize("method,path,allow", [
    ("get", "/v1/chat/completions", "POST"),
    ("put", "/v1/models", "GET, POST"),
    ("post", "/health", "GET"),
    ("delete", "/openapi.json", "GET"),
    ("patch", "/playground/app.js", "GET"),
])
async def test_a_known_path_with_another_method_is_405_with_allow(method, path, allow):
    resp = await call(app_for(), method, path)
    err = assert_envelope(resp, 405, "method_not_allowed")
    assert resp.headers["allow"] == allow
    assert err["message"] == f"{method.upper()} is not allowed on {path}; it takes {allow}"


async def test_the_playground_off_is_a_documented_404_at_the_root():
    cfg = config()
    cfg.server.playground = False
    app = app_for(cfg)
    assert_envelope(await call(app, "get", "/"), 404, "not_found")
    doc = (await call(app, "get", "/openapi.json")).json
    assert doc["paths"]["/"]["get"]["responses"]["404"]["content"]["application/json"] == {
        "schema": doc["components"]["schemas"]["Error"]}


@pytest.mark.parametrize("body,fragment", [
    ("{", "not valid JSON"),
    ("[]", "JSON object"),
    ('{"messages": []}', "'model'"),
    ('{"model": "chat", "messages": []}', "non-empty"),
    ('{"model": "chat", "messages": [{"role": "wizard", "content": "x"}]}', "role"),
    ('{"model": "chat", "messages": [{"role": "user", "content": 5}]}', "content"),
    ('{"model": "chat", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
     "temperature"),
    ('{"model": "chat", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
     "max_tokens"),
    ('{"model": "chat", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
     "stream"),
])
async def test_malformed_chat_bodies_are_400_naming_the_field(body, fragment):
    resp = await call(app_for(), "post", "/v1/chat/completions", content=body)
    err = assert_envelope(resp, 400, "invalid_request_error")
    assert fragment in err["message"]


async def test_model_errors():
    app = app_for()
    msg = [{"role": "user", "content": "hi"}]
    assert_envelope(await call(app, "post", "/v1/chat/completions",
                               json={"model": "nope", "messages": msg}), 404, "model_not_found")
    assert_envelope(await call(app, "post", "/v1/chat/completions",
                               json={"model": "off", "messages": msg}), 404, "model_disabled")
    err = assert_envelope(await call(app, "post", "/v1/chat/completions",
                                     json={"model": "missing", "messages": msg}),
                          503, "model_not_available")
    assert "models_dir" in err["message"]


async def test_prompt_limit_and_body_limit():
    app = app_for(config(max_prompt_chars=10))
    resp = await call(app, "post", "/v1/chat/completions",
                      json={"model": "chat", "messages": [{"role": "user", "content": "x" * 11}]})
    assert "max_prompt_chars" in assert_envelope(resp, 400, "invalid_request_error")["message"]
    app = app_for(config(max_body_bytes=1000))
    resp = await call(app, "post", "/v1/chat/completions", content="x" * 5000)
    assert resp.status == 413


async def test_cors_loopback_and_configured_origins():
    app = app_for(config('[server]\nallowed_origins = ["http://lab.example:*"]\n'))
    for origin in ("http://localhost:5173", "http://127.0.0.1:3000", "http://lab.example:8080"):
        resp = await call(app, "options", "/v1/models", headers={
            "origin": origin, "access-control-request-method": "POST"})
        assert resp.status == 204
        assert resp.headers["access-control-allow-origin"] == origin
        assert "POST" in resp.headers["access-control-allow-methods"]
        assert "DELETE" not in resp.headers["access-control-allow-methods"]
    resp = await call(app, "get", "/v1/models", headers={"origin": "http://localhost:1"})
    assert "x-hypnos-switch-ms" in resp.headers["access-control-expose-headers"]
    resp = await call(app, "get", "/v1/models", headers={"origin": "http://evil.example"})
    assert resp.status == 403 and "access-control-allow-origin" not in resp.headers


async def test_api_keys():
    app = app_for(config('[server]\napi_keys = ["sekrit"]\n'))
    resp = await call(app, "get", "/v1/models")
    err = assert_envelope(resp, 401, "invalid_request_error")
    assert err["code"] == "invalid_api_key" and err["param"] is None
    assert resp.headers["www-authenticate"] == 'Bearer realm="hypnos"'
    assert (await call(app, "get", "/v1/models",
                       headers={"authorization": "Bearer wrong"})).status == 401
    assert (await call(app, "get", "/v1/models",
                       headers={"authorization": "  bearer sekrit "})).status == 200
    assert (await call(app, "get", "/health")).status == 200


async def test_simulated_hardware_is_reported():
    cfg = config("[hardware.simulate]\nvram_bytes = 8589934592\nram_bytes = 34359738368\n")
    caps = (await call(app_for(cfg), "get", "/v1/memory/status")).json["capabilities"]
    assert caps["simulated"] is True and caps["total_vram_bytes"] == 8 * 2**30
    assert caps["usable_vram_budget_bytes"] == 8 * 2**30 - 512 * 2**20


@pytest.mark.parametrize("body,status,type_", [
    ({"model": "chat", "target_tier": "tier9"}, 400, "invalid_request_error"),
    ({"target_tier": "tier2_pinned_ram"}, 400, "invalid_request_error"),
    ({"model": "nope", "target_tier": "tier2_pinned_ram"}, 404, "model_not_found"),
    ({"model": "off", "target_tier": "tier2_pinned_ram"}, 404, "model_disabled"),
])
async def test_memory_tier_errors(body, status, type_):
    assert_envelope(await call(app_for(), "post", "/v1/memory/tier", json=body), status, type_)


async def test_advisor_route():
    app = app_for()
    resp = await call(app, "post", "/v1/advisor",
                      json={"needs": ["chat"], "vram_bytes": 24 * 2**30, "ram_bytes": 64 * 2**30})
    assert resp.status == 200, resp.text
    assert {"machine", "budgets", "models", "specs", "config"} <= set(resp.json)
    assert_envelope(await call(app, "post", "/v1/advisor", json={"needs": ["flying"]}),
                    400, "invalid_request_error")
    assert_envelope(await call(app, "post", "/v1/advisor", json={}), 400,
                    "invalid_request_error")


async def test_every_route_answers_bad_input_with_the_envelope():
    """Walk every registered route with a malformed body: never a 500, always the envelope
    of the route's dialect (OpenAI's; Anthropic's on /v1/messages; Ollama's on /api/*)."""
    app = app_for()
    app.router.finalize() if not app.router.finalized else None
    seen = 0
    walked = {}
    for route in app.router.routes:
        path = "/" + route.path.lstrip("/")
        path = re.sub(r"<[^>]+>", "nope", path)
        for method in route.methods:
            if method in ("HEAD", "OPTIONS"):
                continue
            kw = {"content": "{not json"} if method in ("POST", "PUT") else {}
            resp = await call(app, method.lower(), path, **kw)
            seen += 1
            walked[(method, "/" + route.path.lstrip("/"))] = resp.status
            assert resp.status < 500, f"{method} {path}: {resp.status} {resp.text}"
            if resp.status >= 400 and path.startswith("/api/"):     # Ollama's envelope
                assert isinstance(resp.json["error"], str) and resp.json["error"]
            elif resp.status >= 400:
                assert_envelope(resp, resp.status, resp.json["error"]["type"])
                if path.startswith("/v1/messages"):                # Anthropic's
                    assert resp.json["type"] == "error"
    assert seen >= 9
    for path in ("/v1/documents/convert", "/v1/entities", "/v1/images/generations",
                 "/v1/images/edits"):
        assert walked[("POST", path)] == 400, path
    for key in (("GET", "/v1/documents/<doc_id:str>/pictures"),
                ("GET", "/v1/documents/<doc_id:str>/pictures/<index:int>"),
                ("DELETE", "/v1/documents/<doc_id:str>")):
        assert walked[key] == 404, key


class _FailingEngine:
    """Emits one piece, then fails: the only way to reach the in-stream error path without
    breaking a real model mid-generation."""
    n_ctx_per_slot = 4096
    format = None                 # no chat template read: no tool calls

    def prompt_tokens(self, req) -> int:
        return 1

    def chat(self, req, on_text, cancel):
        from hypnos.engines.errors import EngineError
        from hypnos.engines.records import ChatDelta
        on_text(ChatDelta(content="Hel"))
        raise EngineError("decode failed (injected)")


async def test_workflow_end_to_end_is_reported_per_name():
    app = app_for()
    hdr = {"x-hypnos-workflow": "voice_turn/t1"}
    await call(app, "get", "/v1/models", headers=hdr)
    await call(app, "get", "/v1/models/catalog", headers={**hdr, "x-hypnos-workflow-end": "true"})
    wf = (await call(app, "get", "/v1/memory/status")).json["latency"]["workflows"]
    assert wf["voice_turn"]["count"] == 1 and wf["voice_turn"]["p50"] > 0
    routes = (await call(app, "get", "/v1/memory/status")).json["latency"]["routes"]
    assert routes["/v1/models"]["count"] >= 1


def test_workflows_close_after_30_idle_seconds():
    from hypnos.service.observe.workflows import Workflows
    now = [100.0]
    wf = Workflows(clock=lambda: now[0])
    key = wf.parse("turn/abc")
    assert key == ("turn", "abc") and wf.parse("no-slash") is None
    wf.begin(key, 100.0)
    wf.end(key, 101.5, close=False)
    assert wf.snapshot() == {}
    now[0] = 140.0
    snap = wf.snapshot()
    assert snap["turn"]["count"] == 1 and snap["turn"]["p50"] == 2500   # 1.5 s -> bucket


async def test_kv_park_route():
    app = app_for()
    first = (await call(app, "get", "/v1/memory/kv-park")).json
    assert first["enabled"] is True and first["max_bytes"] > 0        # on by default
    assert_envelope(await call(app, "post", "/v1/memory/kv-park"), 400, "invalid_request_error")
    assert_envelope(await call(app, "post", "/v1/memory/kv-park", json={}), 400,
                    "invalid_request_error")
    assert_envelope(await call(app, "post", "/v1/memory/kv-park", json={"enabled": "yes"}),
                    400, "invalid_request_error")
    body = (await call(app, "post", "/v1/memory/kv-park",
                       json={"enabled": True, "max_bytes": 1024})).json
    assert body == {"enabled": True, "max_bytes": 1024, "used_bytes": 0, "models": []}
    status = (await call(app, "get", "/v1/memory/status")).json
    assert status["kv_park"]["enabled"] is True


@pytest.mark.parametrize("field,value", [("presence_penalty", 3), ("frequency_penalty", "x"),
                                         ("repetition_penalty", -1), ("min_p", 2)])
async def test_sampling_penalties_are_range_checked(field, value):
    body = {"model": "chat", "messages": [{"role": "user", "content": "x"}], field: value}
    err = assert_envelope(await call(app_for(), "post", "/v1/chat/completions", json=body), 400,
                          "invalid_request_error")
    assert field in err["message"]


def test_penalties_reach_the_engine_request():
    from hypnos.service.wire.chat import parse_chat
    from hypnos.service.config.schema import LimitsConfig
    p = parse_chat({"model": "m", "messages": [{"role": "user", "content": "x"}],
                    "presence_penalty": 0.5, "frequency_penalty": 0.25,
                    "repetition_penalty": 1.1, "min_p": 0.05}, LimitsConfig())
    r = p.request
    assert (r.presence_penalty, r.frequency_penalty, r.repetition_penalty, r.min_p) == \
        (0.5, 0.25, 1.1, 0.05)
