"""Two targets drafting with one draft model load its weights once (issue 30): the process's
draft registry holds one ``llama_model`` for both, each target keeps its own draft context,
and the weights are freed with the last target. Tiny random llama GGUFs of SmolLM2's
vocabulary; never a generated text, only what holds whatever the tokens."""
from __future__ import annotations

import threading

import pytest

from conftest import require_smollm2
from tiny_llama import write_tiny_llama

from hypnos.engines.llama.speculative.shared_weights import DRAFT_WEIGHTS
from hypnos.engines.records import ChatRequest, LoadSpec


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    source = require_smollm2()
    root = tmp_path_factory.mktemp("shared-draft")
    return [write_tiny_llama(root / f"tiny-{seed}.gguf", source, seed=seed)
            for seed in (1, 2, 3)]


def target(path, draft):
    from hypnos.engines.llama.engine import LlamaChatEngine
    eng = LlamaChatEngine()
    eng.load(LoadSpec(f"target-{path.stem}", path, files={"draft_path": draft},
                      context_len=512, slots=1, threads=1,
                      options={"speculative": {"draft": "tiny-draft", "n_max": 3}}))
    return eng


def drafts(engine) -> int:
    r = engine.chat(ChatRequest(messages=[{"role": "user", "content": "Count to ten."}],
                                max_tokens=8, temperature=0), None, threading.Event())
    assert r.speculative is not None and r.speculative["method"] == "draft", r.speculative
    return r.completion_tokens


@pytest.mark.real
def test_two_targets_share_one_load_of_their_draft_and_the_last_frees_it(tiny):
    one, two, draft = tiny
    loads = DRAFT_WEIGHTS.loads
    a = target(one, draft)
    b = None
    try:
        b = target(two, draft)
        assert DRAFT_WEIGHTS.loads == loads + 1            # one llama_model for both
        assert DRAFT_WEIGHTS.users(draft) == 2
        assert a._draft.model is b._draft.model
        assert a._draft.ctx is not b._draft.ctx            # each its own KV
        a.unload()
        assert DRAFT_WEIGHTS.users(draft) == 1             # b still drafts with it
        assert drafts(b) > 0
        b.unload()
        assert DRAFT_WEIGHTS.users(draft) == 0             # freed with the last
        a = target(one, draft)                             # and loaded again when needed
        assert DRAFT_WEIGHTS.loads == loads + 2
    finally:
        a.unload()
        if b is not None:
            b.unload()
    assert DRAFT_WEIGHTS.users(draft) == 0


@pytest.mark.real
@pytest.mark.anyio
async def test_memory_status_books_a_shared_draft_once_and_names_who_shares_it(tmp_path):
    from sanic import Sanic

    from test_memory_status_drafts import CPU, drafted_config

    from hypnos.catalog.catalog import load_catalog
    from hypnos.service.app import create_app
    Sanic.test_mode = True
    app = create_app(drafted_config(tmp_path), catalog=load_catalog(), stage=False,
                     hardware=CPU, builds={})
    try:
        for target in ("one", "two"):
            _req, resp = await app.asgi_client.post(
                "/v1/memory/tier", json={"model": target, "target_tier": "tier1_gpu_vram"})
            assert resp.status == 200, resp.json
        _req, resp = await app.asgi_client.get("/v1/memory/status")
        body = resp.json
        rows = {m["id"]: m for m in body["models"]}
        one, two = rows["one"]["draft"], rows["two"]["draft"]
        assert one["shared_with"] == ["two"] and two["shared_with"] == ["one"]
        assert one["tier"] == two["tier"] == "tier1_gpu_vram"
        assert one["weights_booked_bytes"] == two["weights_booked_bytes"] == one["weights_bytes"]
        assert one["kv_bytes"] > 0 and two["kv_bytes"] > 0 and one["in_tier1_budget"]
        booked = sum(rows[t]["placement"]["vram_weight_bytes"]
                     + rows[t]["placement"]["vram_kv_and_workspace_bytes"]
                     for t in ("one", "two"))
        assert body["tier1_vram_used_bytes"] == booked - one["weights_bytes"]   # once
        assert DRAFT_WEIGHTS.users(tmp_path / "draft.gguf") == 2
        _req, resp = await app.asgi_client.post(
            "/v1/memory/tier", json={"model": "one", "target_tier": "tier3_nvme_ssd"})
        assert resp.status == 200, resp.json
        _req, resp = await app.asgi_client.get("/v1/memory/status")
        rows = {m["id"]: m for m in resp.json["models"]}
        assert rows["two"]["draft"]["shared_with"] == []
        assert rows["one"]["draft"]["tier"] == "tier3_nvme_ssd"
        assert DRAFT_WEIGHTS.users(tmp_path / "draft.gguf") == 1
    finally:
        for st in app.ctx.scheduler.models.values():
            if st.engine is not None:
                st.engine.unload()
    assert DRAFT_WEIGHTS.users(tmp_path / "draft.gguf") == 0
