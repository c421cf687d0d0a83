"""KV parking as a use of the prompt cache, and stored Responses conversations tagged in it, on
the real SmolLM2-135M through the server (issue #36): an unload parks every slot in the
cache once (the kv-park routes list the cache's entries) and the next load puts it back into
its slot; on a one-slot model a conversation continued with ``previous_response_id`` after
other traffic comes back from the RAM tier, and deleting its stored response drops its
entries."""
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, fresh_state_dir, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config
from hypnos.service.inference.stored_responses import SESSION_PREFIX

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
slots = {{slots}}
"""
SYSTEM = ("You are the assistant of a small bakery. You answer questions about bread, cakes, "
          "opening hours and prices, politely and briefly. ") * 12
OTHER = ("You help a cyclist plan routes through hills, rivers and small villages. ") * 16


def make_app(slots: int):
    config = CONFIG.format(state=fresh_state_dir(), slots=slots)
    return create_app(parse_config(tomllib.loads(config)), catalog=load_catalog(), stage=False)


async def post(app, path: str, body: dict) -> dict:
    _req, resp = await app.asgi_client.post(path, json=body)
    assert resp.status == 200, resp.text
    return resp.json


async def get(app, path: str) -> dict:
    _req, resp = await app.asgi_client.get(path)
    assert resp.status == 200, resp.text
    return resp.json


def chat_body(system: str, user: str, **kw) -> dict:
    return {"model": "chat", "max_tokens": 6, "temperature": 0, **kw,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": user}]}


def tagged(status: dict, session: str) -> list[dict]:
    return [e for e in status["prompt_cache"]["items"] if e["session"] == session]


async def test_a_one_slot_conversation_comes_back_from_the_cache_and_goes_with_it():
    """Issue #36: a one-slot model never bound a stored conversation (binding its only slot
    would refuse explicit sessions), so the prefix another request overwrote was cached
    untagged and outlived the deleted response. Now it is tagged without reserving the
    slot: an explicit session still gets the slot, turn 2 restores its prefix from RAM, and
    DELETE drops the conversation's entries."""
    require_smollm2()
    app = make_app(slots=1)
    try:
        first = await post(app, "/v1/responses", {
            "model": "chat", "instructions": SYSTEM, "max_output_tokens": 6,
            "input": "What bread do you recommend for a picnic?", "temperature": 0})
        shared = first["usage"]["input_tokens"]
        assert shared > 256                        # the cache's minimum
        # Another conversation takes the only slot, under an explicit session: no 409.
        await post(app, "/v1/chat/completions",
                   chat_body(OTHER, "Where do we start?", session_id="cyclist"))
        key = SESSION_PREFIX + first["id"]
        before = await get(app, "/v1/memory/status")
        assert len(tagged(before, key)) == 1
        second = await post(app, "/v1/responses", {
            "model": "chat", "instructions": SYSTEM, "previous_response_id": first["id"],
            "input": "And which cake for a birthday?", "max_output_tokens": 6,
            "temperature": 0})
        cached = second["usage"]["input_tokens_details"]["cached_tokens"]
        assert cached >= 0.9 * shared, (cached, shared)
        assert second["hypnos_telemetry"]["cached_from"]["ram"] == cached
        held = await get(app, "/v1/memory/status")
        assert tagged(held, key)
        _req, gone = await app.asgi_client.delete(f"/v1/responses/{first['id']}")
        assert gone.status == 200 and gone.json["deleted"] is True
        after = await get(app, "/v1/memory/status")
        assert tagged(after, key) == []
        assert after["prompt_cache"]["entries"] == \
            held["prompt_cache"]["entries"] - len(tagged(held, key))
    finally:
        await app.ctx.scheduler.shutdown()


async def test_an_unload_parks_the_slots_in_the_cache_once_and_the_load_restores_them():
    """Issue #36: KV parking kept its own copy of every slot beside the prompt cache's (an
    unload copied each slot twice, under two caps). Now a short conversation (below the
    cache's minimum) is parked in the cache as its only copy, /v1/memory/kv-park lists the
    cache's entry, the next load writes it back into its slot, and kv-park's max_bytes is
    the cache's RAM tier."""
    require_smollm2()
    app = make_app(slots=2)
    try:
        short = chat_body("You are a helpful assistant. " * 20, "Tell me about foxes.")
        first = await post(app, "/v1/chat/completions", short)
        prompt = first["usage"]["prompt_tokens"]
        assert 100 < prompt < 256
        await post(app, "/v1/memory/tier", {"model": "chat", "target_tier": "tier3_nvme_ssd"})
        park = await get(app, "/v1/memory/kv-park")
        assert park["enabled"] and [m["model"] for m in park["models"]] == ["chat"]
        assert park["models"][0]["slots"] == 1 and park["models"][0]["tokens"] >= prompt
        cache = (await get(app, "/v1/memory/status"))["prompt_cache"]
        assert cache["entries"] == 1
        # One copy: what parking reports is the cache's RAM tier, nothing beside it.
        assert park["used_bytes"] == cache["ram_bytes"] == park["models"][0]["bytes"] > 0
        back = await post(app, "/v1/chat/completions", short)
        phases = back["hypnos_telemetry"]["tier_switch_phases"]
        assert phases["kv_restored_tokens"] >= prompt and phases["kv_restore_ms"] >= 0
        assert back["usage"]["prompt_tokens_details"]["cached_tokens"] >= prompt - 1
        assert back["hypnos_telemetry"]["cached_from"]["slot"] >= prompt - 1
        changed = await post(app, "/v1/memory/kv-park", {"max_bytes": 1 << 30})
        assert changed["max_bytes"] == 1 << 30
        status = await get(app, "/v1/memory/status")
        assert status["prompt_cache"]["ram_max_bytes"] == 1 << 30
    finally:
        await app.ctx.scheduler.shutdown()
