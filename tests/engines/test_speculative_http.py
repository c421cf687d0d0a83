"""Speculative decoding over HTTP (issue 30), through Sanic's ASGI client on the real
SmolLM2-135M: OpenAI Predicted Outputs on /v1/chat/completions and /v1/completions with
usage.completion_tokens_details, ``hypnos_telemetry.speculative`` and the /metrics counters."""
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, require_smollm2

from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = [pytest.mark.anyio, pytest.mark.real]

CONFIG = f"""
models_dir = "{MODELS_DIR}"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
context_len = 2048
[[models]]
id = "lookup"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
context_len = 2048
speculative = "ngram"
"""
TEXT = "one two three four five six seven eight nine ten"
REPEAT = [{"role": "user", "content": f"Repeat exactly, nothing else: {TEXT}"}]


def app():
    require_smollm2()
    return create_app(parse_config(tomllib.loads(CONFIG)), catalog=load_catalog(),
                      stage=False)


async def post(a, path, body):
    _req, resp = await a.asgi_client.post(path, json=body)
    assert resp.status == 200, resp.text
    return resp.json


def check_prediction_counts(body):
    details = body["usage"]["completion_tokens_details"]
    spec = body["hypnos_telemetry"]["speculative"]
    assert spec["method"] == "prediction"
    assert details["accepted_prediction_tokens"] == spec["accepted"]
    assert details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] \
        == spec["drafted"] > 0


async def test_predicted_outputs_on_chat_and_completions_and_metrics():
    a = app()
    body = await post(a, "/v1/chat/completions", {
        "model": "chat", "messages": REPEAT, "max_tokens": 24, "temperature": 0,
        "prediction": {"type": "content", "content": [{"type": "text", "text": TEXT}]}})
    check_prediction_counts(body)
    body = await post(a, "/v1/completions", {
        "model": "chat", "prompt": f"Count: {TEXT}. Again: one two", "max_tokens": 12,
        "temperature": 0, "prediction": {"type": "content", "content": " three four five"}})
    check_prediction_counts(body)
    _req, resp = await a.asgi_client.get("/metrics")
    assert 'hypnos_speculative_drafted_tokens_total{method="prediction",model="chat"}' \
        in resp.text
    assert 'hypnos_speculative_accepted_tokens_total{method="prediction",model="chat"}' \
        in resp.text


async def test_a_model_set_to_ngram_reports_its_drafts():
    a = app()
    body = await post(a, "/v1/chat/completions", {
        "model": "lookup", "messages": REPEAT, "max_tokens": 24, "temperature": 0})
    spec = body["hypnos_telemetry"]["speculative"]
    assert spec["method"] == "ngram" and spec["n_max"] >= 1
    assert 0 <= spec["accepted"] <= spec["drafted"]
    assert "completion_tokens_details" not in body["usage"]


async def test_a_bad_prediction_is_a_400():
    a = app()
    _req, resp = await a.asgi_client.post("/v1/chat/completions", json={
        "model": "chat", "messages": REPEAT, "prediction": {"type": "content"}})
    assert resp.status == 400
    assert "prediction" in resp.json["error"]["message"]
