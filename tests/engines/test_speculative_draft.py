"""A draft model drafting for its target (issue 30) on real GGUFs: SmolLM2 as its own draft
(every token the same model's guess), the vocabulary check, and the Qwen2.5-Coder 0.5B / 1.5B
pair. Never an exact text: the invariants only."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conftest import MODELS_DIR, SMOLLM2, require_smollm2

from hypnos.engines.errors import EngineError
from hypnos.engines.llama.speculative.accept import NEAR_TIE
from hypnos.engines.records import ChatRequest, LoadSpec

QWEN_05 = MODELS_DIR / "qwen2.5-coder-0.5b" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_15 = MODELS_DIR / "qwen2.5-coder-1.5b" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
ASK = [{"role": "user", "content": "List the days of the week, one per line."}]


def engine_with_draft(target: Path, draft: Path, n_max: int = 4, context_len: int = 2048,
                      lookup: bool = True):
    from hypnos.engines.llama.engine import LlamaChatEngine
    for path in (target, draft):
        if not path.is_file():
            pytest.fail(f"{path} is missing: run `./run.sh models` for it first")
    eng = LlamaChatEngine()
    eng.load(LoadSpec("target", target, files={"draft_path": draft}, context_len=context_len,
                      slots=1, threads=1,
                      options={"speculative": {"draft": "the-draft", "n_max": n_max,
                                                "lookup": lookup}}))
    return eng


def ask(engine, max_tokens: int, **kw):
    return engine.chat(ChatRequest(messages=ASK, max_tokens=max_tokens, temperature=0,
                                   logprobs=True, top_logprobs=1, **kw), None,
                       threading.Event())


def assert_target_picked_each(result):
    """Each token is the target's argmax, or a drafted one within ``NEAR_TIE`` of it."""
    for lp in result.logprobs:
        assert lp.logprob >= lp.top[0][2] - NEAR_TIE - 1e-5, (lp.token, lp.logprob, lp.top[0])


def kv_holds_tokens(engine) -> bool:
    """The target's and the draft's KV hold exactly the positions their token lists say."""
    ll, loop, draft = engine._ll, engine._loop, engine._draft
    target_ok = all(ll.llama_memory_seq_pos_max(loop.mem, s.seq_id) + 1 == len(s.tokens)
                    for s in loop.slots)
    draft_ok = all(ll.llama_memory_seq_pos_max(draft.mem, i) + 1 == len(held)
                   for i, held in enumerate(draft.tokens))
    return target_ok and draft_ok


@pytest.mark.real
def test_the_target_as_its_own_draft_is_nearly_always_accepted():
    require_smollm2()
    eng = engine_with_draft(SMOLLM2, SMOLLM2, lookup=False)      # the model's drafts only
    try:
        r = ask(eng, 40)
        spec = r.speculative
        assert spec["method"] == "draft" and spec["n_max"] == 4
        assert spec["drafted"] >= 8
        # The same weights guess; only a batch-shape near-tie may disagree.
        assert spec["accepted"] >= 0.85 * spec["drafted"]
        assert_target_picked_each(r)
        assert kv_holds_tokens(eng)
        # A second turn reuses the prefix in both KVs and drafts again.
        again = ask(eng, 8)
        assert again.cached_tokens > 0 and again.speculative["drafted"] > 0
        assert kv_holds_tokens(eng)
    finally:
        eng.unload()


@pytest.mark.real
def test_a_draft_of_another_vocabulary_is_refused():
    require_smollm2()
    with pytest.raises(EngineError, match="vocabulary"):
        engine_with_draft(QWEN_05, SMOLLM2, context_len=512)


@pytest.mark.real
def test_the_qwen_coder_pair_drafts_and_the_target_decides():
    eng = engine_with_draft(QWEN_15, QWEN_05, context_len=1024)
    try:
        r = ask(eng, 12)
        assert r.speculative["drafted"] > 0 and r.speculative["accepted"] > 0
        assert_target_picked_each(r)
        assert kv_holds_tokens(eng)
    finally:
        eng.unload()
