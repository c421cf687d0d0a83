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
