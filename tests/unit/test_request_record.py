"""The per-request record (service/observe/record.py) and its three readers: the key's usage,
the metrics and the request log read its typed fields.

Regression (issue #28, item 5): the routes used to leave their figures on ``request.ctx``
and the readers fetched them with ``getattr(..., default)``, so a misspelt attribute billed
0 tokens without a word. A record field written under a wrong name is now an AttributeError.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hypnos.engines.records import ChatResult, ChatTimings, EmbedResult, TranscribeResult
from hypnos.planner.types import MIB, ModelShape, Tier
from hypnos.service.config.schema import ModelConfig, RequestLogConfig
from hypnos.service.keys import ApiKey, Limiter, QuotaBook
from hypnos.service.observe.metrics import Metrics
from hypnos.service.observe.record import RequestRecord
from hypnos.service.observe.request_log import RequestLog
from hypnos.service.scheduling.lease import Lease
from hypnos.service.scheduling.pool import ModelState


def lease(model_id: str = "m", switch_ms: float = 12.345) -> Lease:
    cfg = ModelConfig(id=model_id, modality="text_generation", engine="ggml_llama",
                      weights_path=f"{model_id}.gguf")
    st = ModelState(cfg=cfg, paths={}, shape=ModelShape(weights_bytes=100 * MIB))
    return Lease(st, previous_tier=Tier.SSD, tier_switch_ms=switch_ms)


def chat_record() -> RequestRecord:
    record = RequestRecord("req-1", started=0.0, leases=[lease()], status=200)
    first = ChatResult(text="hello", finish_reason="stop", prompt_tokens=11,
                       completion_tokens=4, cached_tokens=3,
                       timings=ChatTimings(prefill_ms=10.004, decode_ms=20.0,
                                           decode_tokens_per_s=33.333))
    record.chat(first, completion_tokens=9)          # two choices: 4 + 5
    return record


def a_request(body: dict) -> SimpleNamespace:
    """What the request log reads of a Sanic request: its raw body and method."""
    return SimpleNamespace(body=json.dumps(body).encode(), method="POST")


def test_a_misspelt_field_is_an_attribute_error():
    record = RequestRecord("req-1", started=0.0)
    with pytest.raises(AttributeError):
        record.tokens_outt = 5  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        record.result = object()  # type: ignore[attr-defined]   # the old side channel


def test_chat_figures_feed_the_request_log():
    log = RequestLog(RequestLogConfig(level="debug"))
    log.observe(a_request({"model": "other", "messages": [{"role": "user", "content": "hi"}]}),
                chat_record(), "/v1/chat/completions", 50.0)
    entry = log.find("req-1")
    assert entry is not None
    assert entry["model"] == "m"                       # the lease's, not the body's
    assert (entry["tokens_in"], entry["tokens_out"], entry["cached_tokens"]) == (11, 9, 3)
    assert entry["tokens_per_s"] == 33.33
    assert entry["inference_ms"] == 30.0               # prefill + decode, rounded
    assert entry["tier_switch_ms"] == 12.35 and entry["previous_tier"] == str(Tier.SSD)
    assert entry["output"] == "hello" and entry["status"] == 200


def test_the_answers_own_telemetry_wins_and_a_record_without_lease_names_the_body_model():
    record = RequestRecord("req-2", started=0.0, status=200,
                           response_body=json.dumps(
                               {"hypnos_telemetry": {"inference_latency_ms": 7.5}}).encode())
    record.embedding(EmbedResult(vectors=[[0.0]], prompt_tokens=6))
    log = RequestLog(RequestLogConfig(level="info"))
    log.observe(a_request({"model": "emb", "input": "x"}), record, "/v1/embeddings", 5.0)
    entry = log.find("req-2")
    assert entry is not None
    assert entry["model"] == "emb" and entry["tier_switch_ms"] is None
    assert (entry["tokens_in"], entry["tokens_out"]) == (6, None)
    assert entry["inference_ms"] == 7.5 and "output" not in entry     # info captures no text


def test_a_key_is_charged_the_records_tokens():
    key = ApiKey(label="k", admin=False, digest=b"", tokens_per_day=100)
    limiter = Limiter(QuotaBook(None))
    record = chat_record()
    record.api_key, record.permit = key, limiter.admit(key)
    assert record.tokens == 20                        # 11 prompt + 9 completion
    limiter.release(record.permit, record.tokens)
    assert limiter.quotas.used("k") == 20
    assert RequestRecord("req-3", started=0.0).tokens == 0


def test_speech_and_transcription_figures_feed_the_metrics():
    metrics = Metrics()
    speech = RequestRecord("req-4", started=0.0, leases=[lease("tts")], status=200,
                           audio_secs=4.0, ttfa_ms=80.0)
    metrics.request_done(speech, "/v1/audio/speech", 2000.0)
    heard = RequestRecord("req-5", started=0.0, leases=[lease("stt")], status=200)
    heard.transcription(TranscribeResult(text="hi", language="en", duration_secs=10.0,
                                         processing_ms=500.0))
    metrics.request_done(heard, "/v1/audio/transcriptions", 600.0)
    failed = RequestRecord("req-6", started=0.0, leases=[lease("tts2")], status=503,
                           audio_secs=1.0)
    metrics.request_done(failed, "/v1/audio/speech", 10.0)
    sample = metrics.registry.get_sample_value
    assert sample("hypnos_tts_rtf", {"model": "tts"}) == 0.5
    assert sample("hypnos_tts_ttfa_ms", {"model": "tts"}) == 80.0
    assert sample("hypnos_stt_rtf", {"model": "stt"}) == 0.05
    assert sample("hypnos_tts_rtf", {"model": "tts2"}) is None       # an error feeds none
    assert sample("hypnos_http_requests_total",
                  {"route": "/v1/audio/speech", "class": "5xx"}) == 1.0
