"""A draft model drafts every slot at once (issue 30): ``DraftModel.propose_many`` puts a row
per drafting sequence in each draft decode, and the decode loop asks it once per step for all
its slots, so with several slots a draft step costs one draft ``llama_decode``, not one per
slot. On SmolLM2 as its own draft (every draft the same weights' guess); never an exact text:
the counts, and that each job's answer is the one the target gives without speculation."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import SMOLLM2, require_smollm2
from near_tie import assert_same_or_a_near_tie

from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest, LoadSpec

pytestmark = pytest.mark.real

SLOTS, N_MAX, TOKENS = 3, 4, 20
ASKS = [[{"role": "user", "content": text}] for text in (
    "List the days of the week, one per line.",
    "Name the planets of the solar system.",
    "Count from one to twelve in words.")]


def load(speculative) -> LlamaChatEngine:
    require_smollm2()
    eng = LlamaChatEngine()
    eng.load(LoadSpec("smol", SMOLLM2, files={"draft_path": SMOLLM2}, context_len=3072,
                      slots=SLOTS, threads=1, options={"speculative": speculative}))
    return eng


def ask(eng, messages):
    return eng.chat(ChatRequest(messages=messages, max_tokens=TOKENS, temperature=0,
                                logprobs=True, top_logprobs=2), None, threading.Event())


@pytest.fixture(scope="module")
def engine():
    eng = load({"draft": "smol", "n_max": N_MAX, "lookup": False})   # the model's drafts only
    yield eng
    eng.unload()


def test_every_slot_drafts_in_the_same_draft_decodes(engine):
    plain = load("off")
    try:
        want = [ask(plain, m) for m in ASKS]
    finally:
        plain.unload()
    draft, loop = engine._draft, engine._loop
    decodes0, steps0 = draft.decodes, loop.steps
    with ThreadPoolExecutor(SLOTS) as pool:
        results = list(pool.map(lambda m: ask(engine, m), ASKS))
    for r, w in zip(results, want, strict=True):  # the target decides every token
        assert_same_or_a_near_tie(w, r)
    for r in results:
        assert r.speculative["method"] == "draft" and r.speculative["drafted"] > 0
        # The same weights guess; only a batch-shape near-tie may disagree.
        assert r.speculative["accepted"] >= 0.8 * r.speculative["drafted"]
    assert draft.widest >= 2                       # one draft decode carried several slots
    # At most n_max draft decodes per target step for all slots together (one per slot
    # would be up to SLOTS * n_max), plus a prompt chunk past the batch now and then.
    assert draft.decodes - decodes0 <= (loop.steps - steps0) * N_MAX + SLOTS


def test_propose_many_decodes_once_per_draft_step(engine):
    draft = engine._draft
    # Mid-answer, where the draft is confident: each slot's prompt and answer so far.
    for m in ASKS:
        ask(engine, m)
    contexts = [list(slot.tokens) for slot in engine._loop.slots]

    def run(requests):
        before = draft.decodes
        return draft.propose_many(requests), draft.decodes - before

    drafts, decodes = run([(i, c, N_MAX) for i, c in enumerate(contexts)])
    assert sum(map(len, drafts)) > 0
    # Step s decodes one row per sequence still drafting: a sequence that stopped early
    # (P_MIN, end of generation) needed one decode past its last token.
    assert decodes == max(len(d) + (len(d) < N_MAX) for d in drafts)
    assert draft.widest == SLOTS or max(map(len, drafts)) == 0
    # The KVs now hold each context and its draft but the last token, and the next call
    # with a context extended by the accepted draft catches up in the first step.
    for i, (c, d) in enumerate(zip(contexts, drafts, strict=True)):
        assert draft.tokens[i] == (c + d[:-1] if len(d) == N_MAX else c + d)
    again, decodes = run([(i, c + d, 2) for i, (c, d) in enumerate(zip(contexts, drafts,
                                                                         strict=True))])
    assert decodes <= 2 and all(len(x) <= 2 for x in again)
    assert draft.propose_many([(0, contexts[0], 0), (1, [], N_MAX)]) == [[], []]
