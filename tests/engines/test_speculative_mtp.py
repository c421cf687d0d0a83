"""``speculative = "mtp"`` end to end through the llama engine (issue 30), on the tiny
random-weight Qwen3.5 GGUF with one nextn block (``tests/tiny_qwen35.py``, ``nextn=1``).

This proves the plumbing, not speed: the weights are noise, so nothing says a draft would be
accepted. What holds whatever the weights and the CPU: the engine loads the heads
(``load_mtp``) and gives the hybrid target the recurrent snapshots a rollback needs; every
slot drafts through the MTP context (one MTP decode per draft step for all slots), the
telemetry says so; and the answers equal the same engine's with speculation off (same file,
same threads), greedy and seeded-sampled alike, because verification keeps only the target's
own picks, drawn with the job's own sampler (greedy parts only at a near-tie, which another
batch shape may tip; the noise weights' greedy answer is one token repeated, the seeded
sampled one varies, so its comparison is the stronger check). A GGUF without
nextn layers configured with "mtp" is refused with an error naming them: at load
(``MtpUnavailable``, a 503) and at config time (the pool's problem for the model).
"""
from __future__ import annotations

import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest

from near_tie import assert_same_draws_or_a_moved_draw, assert_same_or_a_near_tie
from tiny_qwen35 import write_tiny_qwen35
from hypnos.engines.errors import MtpUnavailable
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest, LoadSpec

pytestmark = pytest.mark.real

N_MAX = 3
ASKS = [[{"role": "user", "content": "Write a short poem about the sea."}],
        [{"role": "user", "content": "Count from one to ten, please."}]]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp-engine")
    return (write_tiny_qwen35(d / "tiny-qwen35-mtp.gguf", nextn=1),
            write_tiny_qwen35(d / "tiny-qwen35.gguf"))


def load(path, speculative, slots=2) -> LlamaChatEngine:
    eng = LlamaChatEngine()
    eng.load(LoadSpec("tiny-qwen35-mtp", path, context_len=1024, slots=slots, threads=1,
                      options={"speculative": speculative}))
    return eng


def ask(eng, messages, max_tokens=24, temperature=0.0):
    return eng.chat(ChatRequest(messages=messages, max_tokens=max_tokens,
                                temperature=temperature, seed=11, think_budget=0,
                                logprobs=True, top_logprobs=2), None, threading.Event())


def both(eng, messages):
    """The greedy and the seeded-sampled answer."""
    return ask(eng, messages), ask(eng, messages, 32, temperature=1.0)


def assert_the_targets(pair, want) -> None:
    """``pair`` (greedy, sampled) is what speculation off gave (``want``): greedy token for
    token but at a near-tie the batch shape may move; the seeded sample draw for draw, but
    where a shape's rounding moved a draw that landed at a boundary (the noise weights'
    flat distributions put draws near boundaries often enough to see it on some CPUs)."""
    assert_same_or_a_near_tie(want[0], pair[0])
    assert_same_draws_or_a_moved_draw(want[1], pair[1])


@pytest.fixture(scope="module")
def plain(paths):
    """The answers of the same file with speculation off, one request at a time."""
    eng = load(paths[0], "off")
    try:
        return [both(eng, m) for m in ASKS]
    finally:
        eng.unload()


def test_mtp_drafts_every_slot_and_the_answers_are_the_targets(paths, plain):
    eng = load(paths[0], {"mode": "mtp", "n_max": N_MAX})
    try:
        ll, mtp = eng._ll, eng._draft
        assert eng._spec.config.mode == "mtp" and eng._spec.can_rollback
        assert ll.llama_n_rs_seq(eng._ctx) == N_MAX       # the hybrid target can roll back
        assert eng._loop.observer is mtp and mtp.n_heads == 1
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda m: both(eng, m), ASKS))
        for pair, want in zip(results, plain, strict=True):
            for r in pair:
                spec = r.speculative
                assert spec["method"] == "mtp" and spec["n_max"] == N_MAX
                assert spec["drafted"] > 0 and 0 <= spec["accepted"] <= spec["drafted"]
            assert_the_targets(pair, want)
        # Twice the same request: the same answer (no state left from the first).
        assert_the_targets(both(eng, ASKS[0]), plain[0])
    finally:
        eng.unload()


def test_one_mtp_decode_per_draft_step_carries_every_slot(paths):
    eng = load(paths[0], "mtp")
    try:
        mtp, loop = eng._draft, eng._loop
        seen = []
        draft_many = mtp.propose_many

        def counted(requests):                  # the real call, its width recorded
            before = mtp.decodes
            out = draft_many(requests)
            seen.append((len(requests), mtp.decodes - before, max(map(len, out))))
            return out
        mtp.propose_many = counted
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda m: ask(eng, m, 16), ASKS))
        assert any(width == 2 for width, _, _ in seen)   # both slots in one call
        # One MTP decode per draft step whatever the number of slots (the default n_max).
        assert all(decodes == longest for _, decodes, longest in seen)
        assert loop.steps > 0
    finally:
        eng.unload()


def test_mtp_on_a_gguf_without_heads_is_refused_by_name(paths):
    with pytest.raises(MtpUnavailable, match="nextn"):
        load(paths[1], "mtp")


def test_the_pool_names_the_missing_heads_before_any_load(paths, tmp_path):
    from hypnos.service.config.load import parse_config
    from hypnos.service.scheduling.build import build_state
    block = ('[[models]]\nid = "{id}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
             'weights_path = "{file}"\nspeculative = "mtp"\n')
    cfg = parse_config(tomllib.loads(
        f'models_dir = "{paths[0].parent}"\n'
        + block.format(id="with-heads", file=paths[0].name)
        + block.format(id="without", file=paths[1].name)))
    with_heads, without = (build_state(cfg, m) for m in cfg.models)
    assert with_heads.problem is None and "mtp_path" not in with_heads.paths
    assert "without" in without.problem and "nextn" in without.problem


def test_a_separate_head_file_drafts_over_the_targets_kv(tmp_path):
    """Gemma 4's assistant head comes apart (``files["mtp_path"]``, as the pool resolves the
    catalog's optional ``mtp`` file): it attends over the target's KV and keeps none; under
    ``auto`` the same pulled head is what the policy measures ("auto:mtp")."""
    from tiny_gemma4 import write_tiny_gemma4, write_tiny_gemma4_assistant
    target = write_tiny_gemma4(tmp_path / "tiny-gemma4.gguf")
    head = write_tiny_gemma4_assistant(tmp_path / "mtp-tiny-gemma4.gguf")
    answers = []
    for speculative, files in (("off", {}), ("mtp", {"mtp_path": head}),
                               ("auto", {"mtp_path": head})):
        eng = LlamaChatEngine()
        eng.load(LoadSpec("tiny-gemma4", target, files=files, context_len=1024, slots=2,
                          threads=1, options={"speculative": speculative}))
        try:
            answers.append(both(eng, ASKS[0]))
            if files:
                assert eng._draft.shares_memory and eng._draft.own_model
                r = ask(eng, ASKS[1], 16, temperature=1.0)
                method = "mtp" if speculative == "mtp" else "auto:mtp"
                assert r.speculative["method"] == method and r.speculative["drafted"] > 0
        finally:
            eng.unload()
    assert_the_targets(answers[1], answers[0])
    assert_the_targets(answers[2], answers[0])
