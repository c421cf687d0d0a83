"""Sessions and KV parking through a real `hypnos serve` on the real SmolLM2 model."""
import base64
import sys
import time

import httpx
import pytest

from conftest import MODELS_DIR, ROOT, require_smollm2

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
HISTORY = [{"role": "system", "content": "You are a helpful assistant. " * 20},
           {"role": "user", "content": "Tell me about foxes."}]


def config(extra: str = "") -> str:
    # No drafting: a restored session must answer as the exported one did, token for token,
    # and a step with drafts is another batch shape than one without.
    blocks = "".join(
        f'[[models]]\nid = "{mid}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
        f'weights_path = "{GGUF}"\nslots = 2\ncontext_len = 4096\nspeculative = "off"\n'
        for mid in ("chat", "other"))
    return f'models_dir = "{MODELS_DIR}"\n{extra}\n{blocks}'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    tmp = tmp_path_factory.mktemp("sessions")
    (tmp / "hypnos.toml").write_text(config())
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


def chat(srv, session=None, model="chat", **kw):
    body = {"model": model, "messages": HISTORY, "max_tokens": 8, "temperature": 0, **kw}
    if session:
        body["session_id"] = session
    r = srv.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_export_release_restore_continues_a_session(server):
    chat(server, "s1")
    exported = server.post("/v1/sessions/export", {"model": "chat", "session_id": "s1"})
    # The same turn again on s1 starts from the state that was exported: the restored copy
    # must continue exactly as it does (same KV, same tokens to evaluate).
    first = chat(server, "s1")
    assert exported.status_code == 200, exported.text
    body = exported.json()
    assert body["n_tok"] > 100 and body["blob_bytes"] == len(base64.b64decode(body["blob_b64"]))
    assert server.post("/v1/sessions/release",
                       {"model": "chat", "session_id": "s1"}).json()["released"] is True
    restored = server.post("/v1/sessions/restore", {"model": "chat", "session_id": "s2",
                                                    "blob": body["blob_b64"]})
    assert restored.status_code == 200, restored.text
    assert restored.json()["n_tok"] == body["n_tok"]
    again = chat(server, "s2")
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 100
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]


def test_session_errors(server):
    def err(path, body):
        r = server.post(path, body)
        return r.status_code, r.json()["error"]["type"]
    assert err("/v1/sessions/export", {"model": "chat", "session_id": "nobody"}) == \
        (404, "session_not_found")
    assert err("/v1/sessions/restore", {"model": "chat", "session_id": "x",
                                        "blob": base64.b64encode(b"junk" * 10).decode()}) == \
        (400, "bad_session_blob")
    assert err("/v1/sessions/restore", {"model": "chat", "session_id": "x", "blob": "%%%"}) == \
        (400, "bad_session_blob")
    assert err("/v1/sessions/export", {"model": "chat"})[0] == 400
    assert err("/v1/sessions/export", {"model": "nope", "session_id": "x"}) == \
        (404, "model_not_found")


def test_session_capacity_is_429(server):
    server.post("/v1/sessions/release", {"model": "chat", "session_id": "s2"})
    chat(server, "cap-a")
    chat(server, "cap-b")
    r = server.post("/v1/chat/completions", {"model": "chat", "messages": HISTORY,
                                             "max_tokens": 2, "session_id": "cap-c"})
    assert r.status_code == 429 and r.json()["error"]["type"] == "model_at_session_capacity"
    assert r.headers["retry-after"] == "30"
    for key in ("cap-a", "cap-b"):
        server.post("/v1/sessions/release", {"model": "chat", "session_id": key})


def test_estimate(server):
    body = httpx.get(server.base + "/v1/sessions/estimate?tokens=2000&model=chat").json()
    assert body["model"] == "chat" and body["prefill_tok_per_s"] > 0
    assert body["reprefill_ms"] > 0 and body["recommend"] in ("restore", "reprefill")
    assert httpx.get(server.base + "/v1/sessions/estimate").status_code == 400


def test_watch_holds_the_model(server):
    with httpx.stream("GET", server.base + "/v1/sessions/watch?session_id=w&model=chat",
                      timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()       # keep the iterator: dropping it closes the stream
        assert next(lines).startswith(": watch established")
        for _ in range(40):
            chat_state = next(m for m in server.status()["models"] if m["id"] == "chat")
            if chat_state["active_leases"] >= 1:
                break
            time.sleep(0.05)
        assert chat_state["active_leases"] >= 1


def test_kv_parking_brings_a_conversation_back_after_a_swap(tmp_path):
    require_smollm2()
    from hypnos.engines.gguf_meta import read_gguf_meta
    from hypnos.planner import PlacementRequest, place
    shape = read_gguf_meta(MODELS_DIR / GGUF).to_shape()
    one = place(PlacementRequest(shape, 1 << 40, slots=2, context_len=4096)).booked_tier1_bytes
    sim = (f"[hardware]\nkv_park = true\n[hardware.simulate]\n"
           f"vram_bytes = {512 * 2**20 + int(one * 1.5)}\nram_bytes = {16 * 2**30}\n")
    (tmp_path / "hypnos.toml").write_text(config(sim))
    srv = ServerProcess(tmp_path / "hypnos.toml", tmp_path / "server.log", ready_timeout=120)
    try:
        first = chat(srv)
        chat(srv, model="other")                      # evicts "chat"; its KV is parked
        park = httpx.get(srv.base + "/v1/memory/kv-park").json()
        assert park["enabled"] and park["models"][0]["model"] == "chat"
        assert park["models"][0]["tokens"] > 100
        back = chat(srv)                              # evicts "other", restores "chat"
        phases = back["hypnos_telemetry"]["tier_switch_phases"]
        assert phases["kv_restored_tokens"] > 100 and phases["kv_restore_ms"] >= 0
        assert back["usage"]["prompt_tokens_details"]["cached_tokens"] > 100
        assert back["choices"][0]["message"]["content"] == \
            first["choices"][0]["message"]["content"]
    finally:
        srv.stop()
