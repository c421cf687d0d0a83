"""Ollama's keep_alive through a real `hypnos serve` on SmolLM2 (issue #35): values it cannot
honour are a 400 in Ollama's envelope before any work and /api/ps stays 200; keep_alive 0 on
a model another request is streaming from delivers its answer (never a 429) and the model
reaches tier 2 once both ended; a negative value keeps the model loaded, named by an alias,
and /api/ps shows Ollama's far-future expiry for it."""
from __future__ import annotations

import threading
import time
from datetime import datetime

import httpx
import ollama
import pytest

from model_dirs import serve

MODEL, ALIAS = "smol", "smol-alias"
CONFIG = f"""
[[models]]
id = "{MODEL}"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
context_len = 1024
slots = 2
aliases = ["{ALIAS}"]
"""
# SmolLM2's <|endoftext|> and <|im_end|>: banned, so the streaming request runs its
# max_tokens whatever the text.
NO_END = {"0": -100, "2": -100}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = serve(tmp_path_factory.mktemp("keep_alive"), CONFIG, smol=True)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.base, timeout=120)


def tier(server) -> str:
    status = httpx.get(server.base + "/v1/memory/status", timeout=30).json()
    return next(m["current_tier"] for m in status["models"] if m["id"] == MODEL)


def ps(server) -> list[dict]:
    resp = httpx.get(server.base + "/api/ps", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["models"]


def wait_for_tier(server, wanted: str, secs: float = 60) -> None:
    deadline = time.monotonic() + secs
    while (now := tier(server)) != wanted:
        assert time.monotonic() < deadline, f"{MODEL} stayed in {now}, not {wanted}"
        time.sleep(0.1)


@pytest.mark.parametrize("raw", [
    "NaN", "Infinity", "-Infinity", "1e308", '"999999999h"', '"soon"', '"1h30"', "true"])
def test_a_keep_alive_it_cannot_honour_is_a_400_and_ps_stays_up(server, raw):
    body = f'{{"model": "{MODEL}", "prompt": "Hi", "stream": false, "keep_alive": {raw}}}'
    resp = httpx.post(server.base + "/api/generate", content=body, timeout=60,
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert set(resp.json()) == {"error"}
    if raw not in ("NaN", "Infinity", "-Infinity"):    # JSON's own refusal may name the body
        assert "keep_alive" in resp.json()["error"]
    assert ps(server) == [] and tier(server) == "tier3_nvme_ssd"    # nothing was loaded


def test_keep_alive_zero_on_a_busy_model_delivers_and_demotes_after(server, client):
    ended: dict[str, float] = {}

    def long_stream(first_line: threading.Event) -> None:
        with httpx.stream("POST", server.base + "/v1/chat/completions", timeout=300, json={
                "model": MODEL, "stream": True, "max_tokens": 120, "logit_bias": NO_END,
                "messages": [{"role": "user", "content": "Count to 500."}]}) as resp:
            assert resp.status_code == 200
            for _ in resp.iter_lines():
                first_line.set()
        ended["stream"] = time.monotonic()

    started = threading.Event()
    holder = threading.Thread(target=long_stream, args=(started,))
    holder.start()
    try:
        assert started.wait(120), "the streaming request never started"
        r = client.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                        options={"num_predict": 1}, keep_alive=0)
        ended["keep_alive_0"] = time.monotonic()
    finally:
        holder.join(300)
    assert r.done and r.eval_count > 0 and r.message.role == "assistant"
    # The answer came while the other request still held the model (the busy path) ...
    assert ended["keep_alive_0"] < ended["stream"]
    # ... and the demotion waited for it, then happened.
    wait_for_tier(server, "tier2_pinned_ram")
    assert ps(server) == []


@pytest.mark.parametrize("keep", [-1, "-5m"])
def test_a_negative_keep_alive_keeps_the_model_loaded(server, client, keep):
    r = client.generate(model=ALIAS, prompt="Hi", options={"num_predict": 2}, keep_alive=keep)
    assert r.done
    (row,) = ps(server)
    assert row["model"] == MODEL
    # Ollama renders "loaded indefinitely" as now plus Go's largest duration (year ~2318).
    assert datetime.fromisoformat(row["expires_at"]).year > 2300
    assert (client.ps().models[0].expires_at.year > 2300)
    # A later keep_alive 0 (Ollama's explicit unload) lets it go.
    unload = client.generate(model=MODEL, prompt="", keep_alive=0)
    assert unload.done_reason == "unload" and ps(server) == []
    assert tier(server) == "tier2_pinned_ram"
