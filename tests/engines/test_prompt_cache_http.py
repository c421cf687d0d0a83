"""The prompt cache through the server, on the real SmolLM2-135M: a conversation whose slot
other conversations took reports its prefix restored from the RAM tier
(``hypnos_telemetry.cached_from``), and a second server over the same state_dir (a restart)
from the disk tier; /v1/memory/status counts both."""
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, fresh_state_dir, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = [pytest.mark.anyio, pytest.mark.real]

CONFIG = f"""
models_dir = "{MODELS_DIR}"
[server]
state_dir = "{{state}}"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
context_len = 2048
slots = 2
"""
SYSTEM = ("You are the assistant of a small bakery. You answer questions about bread, cakes, "
          "opening hours and prices, politely and briefly. ") * 12
OTHERS = [("You help a cyclist plan routes through hills, rivers and small villages. ") * 16,
          ("You are a museum guide who explains paintings to visiting school classes. ") * 16]


def make_app(state: str):
    return create_app(parse_config(tomllib.loads(CONFIG.format(state=state))),
                      catalog=load_catalog(), stage=False)


async def chat(app, messages) -> dict:
    _req, resp = await app.asgi_client.post("/v1/chat/completions", json={
        "model": "chat", "messages": messages, "max_tokens": 6, "temperature": 0})
    assert resp.status == 200, resp.text
    return resp.json


async def test_turn2_from_ram_then_from_disk_after_a_restart():
    require_smollm2()
    state = fresh_state_dir()
    app = make_app(state)
    turn1 = [{"role": "system", "content": SYSTEM},
             {"role": "user", "content": "What bread do you recommend for a picnic?"}]
    first = await chat(app, turn1)
    for system in OTHERS:
        await chat(app, [{"role": "system", "content": system},
                         {"role": "user", "content": "Where do we start?"}])
    turn2 = turn1 + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "And which cake for a birthday?"}]
    shared = first["usage"]["prompt_tokens"]
    kept = await chat(app, turn2)
    cached = kept["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= shared
    assert kept["hypnos_telemetry"]["cached_from"] == {"slot": 0, "ram": cached, "disk": 0}
    _req, resp = await app.asgi_client.get("/v1/memory/status")
    row = resp.json["prompt_cache"]["models"][0]
    assert row["model"] == "chat" and row["ram"]["hits"] == 1
    await app.ctx.scheduler.shutdown()       # the "restart": this server's engine goes

    again = make_app(state)
    restored = await chat(again, turn2)
    cached = restored["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= shared
    assert restored["hypnos_telemetry"]["cached_from"] == {"slot": 0, "ram": 0, "disk": cached}
    await again.ctx.scheduler.shutdown()


async def test_a_changed_timestamp_is_named_as_the_parting():
    """Two prompts that differ only in a date inside the system prompt: the second answer's
    telemetry names the token where it parted from the cached one, with both sides' text (a
    prefix that short is not worth a slot: no more than it is reused); the request log
    keeps the positions, and the text only at debug; Ollama's prompt_eval_count counts only
    the tokens evaluated."""
    require_smollm2()
    app = make_app(fresh_state_dir())

    def asked(day: str) -> list[dict]:
        return [{"role": "system", "content": f"Today is 2026-11-{day}. " + SYSTEM},
                {"role": "user", "content": "What bread do you recommend for a picnic?"}]
    await chat(app, asked("17"))
    second = await chat(app, asked("28"))
    parting = second["hypnos_telemetry"]["prompt_parting"]
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0 < parting["parted_at"] == parting["best_cached_prefix"] < 40
    assert cached <= parting["parted_at"]
    assert parting["cached"] != parting["prompt"]
    assert ("17" in parting["before"] + parting["cached"]
            and "28" in parting["before"] + parting["prompt"])

    _req, resp = await app.asgi_client.get("/v1/logs")
    entry = resp.json["records"][0]
    assert resp.json["level"] == "info"
    assert entry["prompt_parting"] == {"best_cached_prefix": parting["best_cached_prefix"],
                                       "parted_at": parting["parted_at"]}
    assert sum(entry["cached_from"].values()) == cached
    _req, resp = await app.asgi_client.post("/v1/logs/level", json={"level": "debug"})
    assert resp.status == 200, resp.text
    await chat(app, asked("05"))
    _req, resp = await app.asgi_client.get("/v1/logs")
    logged = resp.json["records"][0]["prompt_parting"]
    assert "05" in logged["before"] + logged["prompt"]
    assert any(day in logged["before"] + logged["cached"] for day in ("17", "28"))

    # Ollama: the same prompt again reuses all but its last token, evaluated once more.
    _req, resp = await app.asgi_client.post("/api/chat", json={
        "model": "chat", "messages": asked("28"), "stream": False,
        "options": {"num_predict": 4, "temperature": 0}})
    assert resp.status == 200, resp.text
    answer = resp.json
    assert answer["hypnos_telemetry"]["cached_from"]["slot"] > 0
    reused = answer["hypnos_telemetry"]["engine"]["cached_tokens"]
    assert answer["prompt_eval_count"] == second["usage"]["prompt_tokens"] - reused
    assert answer["prompt_eval_count"] < 8
    await app.ctx.scheduler.shutdown()
