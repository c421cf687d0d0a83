"""HTTP routes through Sanic's ASGI client on the default lineup's real model files (moved from
tests/http/test_http.py: these read SmolLM2's GGUF, and two of them load it)."""
import json
import pytest
from conftest import EngineEffects
from test_http import _FailingEngine, app_for, assert_envelope, call  # noqa: F401

pytestmark = pytest.mark.anyio


async def test_memory_status_fields():
    resp = await call(app_for(), "get", "/v1/memory/status")
    body = resp.json
    assert body["capabilities"]["accelerator"] in ("NvidiaCuda", "AppleMetal", "Cpu")
    for key in ("tier1_vram_used_bytes", "tier1_vram_free_bytes", "tier1_vram_real_free_bytes",
                "tier2_pinned_ram_used_bytes", "process_footprint_bytes", "recent_evictions",
                "latency", "kv_park"):
        assert key in body
    chat = next(m for m in body["models"] if m["id"] == "chat")
    assert chat["total_weight_bytes"] > 90_000_000 and chat["engine"] == "ggml_llama"
    assert chat["current_tier"] == "tier3_nvme_ssd" and chat["reload_estimate_ms"] > 0


async def test_memory_tier_pins_and_drops_real_weights():
    app = app_for()
    resp = await call(app, "post", "/v1/memory/tier",
                      json={"model": "chat", "target_tier": "tier2_pinned_ram"})
    assert resp.status == 200 and resp.json["current_tier"] == "tier2_pinned_ram"
    assert resp.json["placement"]["primary_tier"] == "tier2_pinned_ram"
    status = (await call(app, "get", "/v1/memory/status")).json
    assert status["tier2_pinned_ram_used_bytes"] >= 90_000_000
    resp = await call(app, "post", "/v1/memory/tier",
                      json={"model": "chat", "target_tier": "tier3_nvme_ssd"})
    assert resp.json["current_tier"] == "tier3_nvme_ssd"
    status = (await call(app, "get", "/v1/memory/status")).json
    assert status["tier2_pinned_ram_used_bytes"] == 0


async def test_catalog_route_and_modality_filter():
    app = app_for()
    body = (await call(app, "get", "/v1/models/catalog")).json
    assert body["object"] == "list" and body["catalog_version"] == 1
    entry = next(e for e in body["data"] if e["id"] == "smollm2:135m")
    variant = entry["variants"][0]
    assert variant["installed"] is True and variant["files"][0]["present"] is True
    assert "[[models]]" in variant["config_block"]
    only = (await call(app, "get", "/v1/models/catalog?modality=speech_to_text")).json["data"]
    assert only and all("speech_to_text" in [e["modality"], *e["additional_modalities"]]
                        for e in only)


async def test_engine_failure_mid_stream_is_an_error_chunk_then_done():
    app = app_for(effects=EngineEffects(_FailingEngine()))
    body = {"model": "chat", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    resp = await call(app, "post", "/v1/chat/completions", json=body)
    assert resp.status == 200
    events = [ln[len("data: "):] for ln in resp.text.splitlines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["error"]["type"] == "server_error" and "injected" in last["error"]["message"]
    assert json.loads(events[1])["choices"][0]["delta"]["content"] == "Hel"
    resp = await call(app, "post", "/v1/chat/completions", json={**body, "stream": False})
    assert_envelope(resp, 500, "server_error")


async def test_next_model_header_loads_it_in_the_background():
    import asyncio
    app = app_for()
    resp = await call(app, "get", "/v1/models", headers={"x-hypnos-next-model": "chat"})
    assert resp.status == 200
    for _ in range(200):
        if app.ctx.scheduler.models["chat"].tier == "tier1_gpu_vram":
            break
        await asyncio.sleep(0.05)
    assert app.ctx.scheduler.models["chat"].tier == "tier1_gpu_vram"
    resp = await call(app, "get", "/v1/models", headers={"x-hypnos-next-model": "nope"})
    assert resp.status == 200      # unknown ids are ignored


async def test_metrics_families():
    app = app_for()
    await call(app, "get", "/v1/models")
    await call(app, "post", "/v1/memory/tier",
               json={"model": "chat", "target_tier": "tier1_gpu_vram"})
    resp = await call(app, "get", "/metrics")
    assert resp.status == 200 and resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    assert 'hypnos_http_requests_total{class="2xx",route="/v1/models"} 1.0' in text
    assert "hypnos_scheduler_promotions_total 1.0" in text
    assert 'hypnos_model_tier{model="chat"} 1.0' in text
    for family in ("hypnos_prefix_cache_hits_total", "hypnos_prefix_cache_tokens_reused_total",
                   "hypnos_uptime_seconds", "hypnos_scheduler_admissions_rejected_total"):
        assert family in text
