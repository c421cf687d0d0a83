"""Admission on a real model: the deadline header on a cold SmolLM2, the profile in
/v1/memory/status (moved from tests/scheduler/test_admission.py)."""
import pytest
from test_admission import make_app  # noqa: F401

pytestmark = pytest.mark.anyio


async def test_deadline_header_on_a_cold_model():
    app = make_app()
    body = {"model": "chat", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    load_ms = app.ctx.scheduler.models["chat"].reload_estimate_ms()
    assert load_ms > 1
    _req, resp = await app.asgi_client.post("/v1/chat/completions", json=body,
                                            headers={"x-hypnos-deadline-ms": "1"})
    assert resp.status == 503 and resp.json["error"]["type"] == "deadline_unmeetable"
    assert int(resp.headers["retry-after"]) >= 1
    assert app.ctx.scheduler.models["chat"].tier == "tier3_nvme_ssd"      # nothing loaded
    _req, resp = await app.asgi_client.post("/v1/chat/completions", json=body,
                                            headers={"x-hypnos-deadline-ms": "soon"})
    assert resp.status == 400 and "x-hypnos-deadline-ms" in resp.json["error"]["message"]
    _req, resp = await app.asgi_client.post("/v1/chat/completions", json=body,
                                            headers={"x-hypnos-deadline-ms": "600000"})
    assert resp.status == 200
    assert float(resp.headers["x-hypnos-estimated-wait-ms"]) == pytest.approx(load_ms, abs=1)
    _req, resp = await app.asgi_client.get("/metrics")
    assert "hypnos_scheduler_admissions_rejected_total 1.0" in resp.text


async def test_status_reports_the_profile():
    app = make_app('[server]\nprofile = "voice_assistant"\n')
    _req, resp = await app.asgi_client.get("/v1/memory/status")
    assert resp.json["profile"] == {"name": "voice_assistant",
                                    "objective": {"metric": "first_audio", "target_ms": 1500}}
    app = make_app('[server]\nprofile = "batch"\n')
    _req, resp = await app.asgi_client.get("/v1/memory/status")
    assert resp.json["profile"]["objective"] == {"metric": "throughput"}
    _req, resp = await make_app().asgi_client.get("/v1/memory/status")
    assert "profile" not in resp.json
