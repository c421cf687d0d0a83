"""GET /metrics (spec section 16), parsed with prometheus-client's own text parser: every
family of the section with a help string, labelled per model and per tier, after real
traffic on the SmolLM2 model."""
import tomllib

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sanic import Sanic

from conftest import MODELS_DIR, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
SECTION_16 = (
    "hypnos_http_requests_total", "hypnos_http_request_latency_ms_sum",
    "hypnos_http_request_latency_ms_max", "hypnos_chat_ttft_ms",
    "hypnos_chat_decode_tokens_per_s", "hypnos_chat_prefill_tokens_per_s",
    "hypnos_prefix_cache_hits_total", "hypnos_prefix_cache_misses_total",
    "hypnos_prefix_cache_tokens_reused_total", "hypnos_tts_rtf", "hypnos_tts_ttfa_ms",
    "hypnos_stt_rtf", "hypnos_image_jct_s", "hypnos_document_ms_per_page",
    "hypnos_document_pages_total", "hypnos_scheduler_promotions_total",
    "hypnos_scheduler_evictions_total", "hypnos_scheduler_load_failures_total",
    "hypnos_scheduler_admissions_rejected_total", "hypnos_model_load_failures_total",
    "hypnos_model_tier", "hypnos_model_gpu_layers", "hypnos_model_active_leases",
    "hypnos_model_requests_total", "hypnos_vram_bytes", "hypnos_pinned_ram_bytes",
    "hypnos_gpu_utilization_percent", "hypnos_api_key_requests_total",
    "hypnos_api_key_rejections_total", "hypnos_api_key_tokens_total",
    "hypnos_api_key_tokens_today", "hypnos_uptime_seconds",
    "hypnos_process_start_time_seconds")


def make_app():
    require_smollm2()
    text = (f'models_dir = "{MODELS_DIR}"\n[server]\napi_keys = ["root"]\n'
            '[[server.keys]]\nkey = "u"\nlabel = "ui"\n')
    for mid in ("chat", "spare"):
        text += (f'[[models]]\nid = "{mid}"\nmodality = "text_generation"\n'
                 f'engine = "ggml_llama"\nweights_path = "{GGUF}"\ncontext_len = 2048\n')
    return create_app(parse_config(tomllib.loads(text)), catalog=load_catalog(), stage=False)


async def scrape(app) -> dict:
    _req, resp = await app.asgi_client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {}
    for fam in text_string_to_metric_families(resp.text):
        # The parser names a counter family without its _total suffix.
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        families[name] = fam
    return families


def sample(fam, suffix="", **labels) -> float:
    for s in fam.samples:
        if s.name == fam.name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no {fam.name}{suffix} {labels}")


async def test_every_family_parses_with_help_and_per_model_and_tier_labels():
    app = make_app()
    headers = {"authorization": "Bearer u"}
    body = {"model": "chat", "max_tokens": 3, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hi"}]}
    _req, resp = await app.asgi_client.post("/v1/chat/completions", json=body, headers=headers)
    assert resp.status == 200, resp.text
    tokens = resp.json["usage"]["total_tokens"]
    await app.asgi_client.post("/v1/memory/tier", headers={"authorization": "Bearer root"},
                               json={"model": "spare", "target_tier": "tier2_pinned_ram"})
    fams = await scrape(app)
    missing = [n for n in SECTION_16 if n not in fams]
    assert missing == []
    assert all(fams[n].documentation for n in SECTION_16)

    assert sample(fams["hypnos_http_requests_total"], "_total",
                  route="/v1/chat/completions", **{"class": "2xx"}) == 1
    assert sample(fams["hypnos_http_request_latency_ms_sum"],
                  route="/v1/chat/completions") >= sample(
        fams["hypnos_http_request_latency_ms_max"], route="/v1/chat/completions") > 0
    assert sample(fams["hypnos_chat_ttft_ms"], "_count", model="chat") == 1
    assert sample(fams["hypnos_chat_decode_tokens_per_s"], model="chat") > 0
    assert sample(fams["hypnos_model_tier"], model="chat") == 1
    assert sample(fams["hypnos_model_tier"], model="spare") == 2
    assert sample(fams["hypnos_model_gpu_layers"], model="chat") == 30
    assert sample(fams["hypnos_model_requests_total"], model="chat") == 1
    assert sample(fams["hypnos_tier_models"], tier="tier1_gpu_vram") == 1
    assert sample(fams["hypnos_tier_models"], tier="tier2_pinned_ram") == 1
    assert sample(fams["hypnos_model_resident_bytes"], model="spare",
                  tier="tier2_pinned_ram") > 90_000_000
    assert sample(fams["hypnos_vram_bytes"], kind="booked") > 0
    assert sample(fams["hypnos_vram_bytes"], kind="free") == \
        sample(fams["hypnos_vram_bytes"], kind="budget") - \
        sample(fams["hypnos_vram_bytes"], kind="booked")
    assert sample(fams["hypnos_api_key_tokens_total"], "_total", key="ui") == tokens
    assert sample(fams["hypnos_api_key_tokens_today"], key="ui") == tokens
    assert sample(fams["hypnos_scheduler_promotions_total"], "_total") == 1

    # A model taken out of the pool leaves no stale series behind.
    _req, resp = await app.asgi_client.delete("/v1/models/spare",
                                              headers={"authorization": "Bearer root"})
    assert resp.status == 200
    fams = await scrape(app)
    assert all(s.labels.get("model") != "spare" for s in fams["hypnos_model_tier"].samples)
