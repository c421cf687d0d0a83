"""Speculative decoding on the real SmolLM2-135M (issue 30): n-gram drafts and predicted
outputs are checked by the target in its own batches, so every kept token is the one the
target picks from the logits it computed at that position (or a draft within a near tie of
it), drafts leave no trace in the KV, and a grammar still holds. Texts are never asserted:
only what holds on any machine."""
from __future__ import annotations

import json
import threading

import pytest

from conftest import SMOLLM2, require_smollm2
from near_tie import assert_same_or_a_near_tie

from hypnos.engines.llama.speculative.accept import NEAR_TIE
from hypnos.engines.records import ChatRequest, LoadSpec

CODE = "\n".join(f"def function_{i}(x):\n    return x * {i} + {i * 3}\n" for i in range(8))
EDIT = [{"role": "user", "content": "Repeat this code exactly, renaming function_3 to "
         "triple:\n\n" + CODE}]
TEXT = ("The quick brown fox jumps over the lazy dog. " * 3
        + "Pack my box with five dozen liquor jugs.")
REPEAT = [{"role": "user", "content": "Repeat the following text exactly, nothing else:\n\n"
           + TEXT}]


def load(mode: str):
    require_smollm2()
    from hypnos.engines.llama.engine import LlamaChatEngine
    eng = LlamaChatEngine()
    # One thread: see tests/engines/test_engine_llama.py.
    eng.load(LoadSpec("smollm2", SMOLLM2, context_len=4096, slots=2, threads=1,
                      options={"speculative": mode}))
    return eng


@pytest.fixture(scope="module")
def ngram():
    eng = load("ngram")
    yield eng
    eng.unload()


@pytest.fixture(scope="module")
def plain():
    eng = load("off")
    yield eng
    eng.unload()


def ask(engine, messages, max_tokens=48, **kw):
    return engine.chat(ChatRequest(messages=messages, max_tokens=max_tokens, temperature=0,
                                   **kw), None, threading.Event())


def kv_matches_tokens(engine) -> bool:
    """Every slot's KV holds exactly the positions its token list says (no drafted tail)."""
    loop, ll = engine._loop, engine._ll
    return all(ll.llama_memory_seq_pos_max(loop.mem, s.seq_id) + 1 == len(s.tokens)
               for s in loop.slots)


def assert_target_picked_each(result):
    """Greedy with no grammar: each token is the argmax of the raw logits the target
    computed at its position, or a drafted token within ``NEAR_TIE`` of it (its own logprob
    is at most that under the top one). A draft kept past the tolerance fails."""
    assert result.logprobs
    for lp in result.logprobs:
        assert lp.logprob >= lp.top[0][2] - NEAR_TIE - 1e-5, (lp.token, lp.logprob, lp.top[0])


@pytest.mark.real
def test_ngram_drafts_are_checked_by_the_target(ngram):
    r = ask(ngram, EDIT, logprobs=True, top_logprobs=1)
    spec = r.speculative
    assert spec["method"] == "ngram" and spec["n_max"] >= 1
    assert 0 < spec["accepted"] <= spec["drafted"]
    assert_target_picked_each(r)
    assert kv_matches_tokens(ngram)


@pytest.mark.real
def test_ngram_greedy_answer_is_the_plain_answer(ngram, plain):
    """Same request, fresh slots on both: the answers agree token for token, except that a
    near-tie in the target's logits may fall the other way (llama.cpp's sums depend on the
    batch shape), and then only at such a tie."""
    msgs = [{"role": "system", "content": "Fresh prompt A."}] + EDIT
    a = ask(plain, msgs, logprobs=True, top_logprobs=2)
    b = ask(ngram, msgs, logprobs=True, top_logprobs=2)
    assert a.cached_tokens == b.cached_tokens == 0
    assert b.speculative["drafted"] > 0
    assert_same_or_a_near_tie(a, b)


@pytest.mark.real
def test_rolled_back_drafts_leave_no_trace(ngram, plain):
    """The follow-up turn reuses the same prefix as it would without speculation: the KV
    holds what plain decoding leaves (the prompt and the answer but its last token)."""
    msgs = [{"role": "system", "content": "Fresh prompt B."}] + EDIT
    seen = []
    for eng in (ngram, plain):
        first = ask(eng, msgs)
        assert kv_matches_tokens(eng)
        follow = msgs + [{"role": "assistant", "content": first.text},
                         {"role": "user", "content": "Thanks."}]
        second = ask(eng, follow, max_tokens=4)
        # The reusable prefix: the first prompt plus the answer, less the one token the
        # engine never evaluates (the last one sampled), whatever the drafts were.
        assert second.cached_tokens <= first.prompt_tokens + first.completion_tokens - 1
        assert second.cached_tokens >= first.prompt_tokens
        seen.append((first, second))
    (f1, s1), (f2, s2) = seen
    if f1.text == f2.text:
        assert s1.cached_tokens == s2.cached_tokens


@pytest.mark.real
def test_prediction_equal_to_the_answer_is_mostly_accepted(plain):
    first = ask(plain, REPEAT)
    again = ask(plain, REPEAT, prediction=first.text)
    spec = again.speculative
    assert spec["method"] == "prediction"
    assert spec["drafted"] > 0
    assert spec["accepted"] >= 0.6 * spec["drafted"]
    assert spec["accepted"] >= 0.5 * again.completion_tokens
    assert kv_matches_tokens(plain)


@pytest.mark.real
def test_a_wrong_prediction_is_rejected_and_counted(plain):
    wrong = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 4
    r = ask(plain, REPEAT, prediction=wrong, logprobs=True, top_logprobs=1)
    spec = r.speculative
    assert spec["drafted"] > spec["accepted"] >= 0
    assert_target_picked_each(r)
    assert kv_matches_tokens(plain)


@pytest.mark.real
def test_grammar_holds_under_drafts(ngram):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "count": {"type": "integer"}},
              "required": ["name", "count"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema}}
    msgs = [{"role": "user", "content": 'Give {"name": "fox", "count": 3} as JSON.'}]
    # A prediction that breaks the schema halfway: the grammar refuses its tail.
    r = ask(ngram, msgs, max_tokens=40, response_format=fmt,
            prediction='{"name": "fox", "count": three, "extra": true}')
    assert r.speculative["drafted"] > 0
    data = json.loads(r.text)
    assert set(data) == {"name", "count"} and isinstance(data["count"], int)
    assert kv_matches_tokens(ngram)


@pytest.mark.real
def test_a_forced_call_under_drafts_is_a_whole_call(ngram):
    weather = {"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}}, "required": ["city"]}}}
    msgs = [{"role": "user", "content": "Weather in Paris? Paris, Paris, Paris."}]
    r = ask(ngram, msgs, max_tokens=40, tools=[weather], tool_choice="get_weather",
            prediction='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert r.speculative["drafted"] > 0
    assert r.finish_reason == "tool_calls" and len(r.tool_calls) == 1
    call = r.tool_calls[0]
    assert call.name == "get_weather"
    assert isinstance(json.loads(call.arguments)["city"], str)
    assert kv_matches_tokens(ngram)


@pytest.mark.real
def test_auto_drafts_while_it_measures_and_the_target_still_decides():
    eng = load("auto")
    try:
        r = ask(eng, EDIT, max_tokens=24, logprobs=True, top_logprobs=1)
        assert r.speculative["method"] == "auto:ngram"
        assert r.speculative["drafted"] > 0       # the warm-up drafts
        assert_target_picked_each(r)
        assert kv_matches_tokens(eng)
        stats = eng._spec.of("").kinds["text"]
        assert stats.plain_steps + stats.draft_steps > 0
    finally:
        eng.unload()


@pytest.mark.real
def test_the_engine_names_spaced_tokens_by_their_bare_twins(ngram):
    """Prompt lookup across a respelling (a value copied from prose into JSON loses its
    space) needs the vocabulary's names: on SmolLM2's vocabulary " data" is named "data",
    and a token with no leading space is its own name."""
    from hypnos.engines.llama.prompt import tokenize
    name = ngram._spec.spelling
    assert name is not None

    def one(text):
        ids = tokenize(ngram._ll, ngram._loop.vocab, text, False)
        assert len(ids) == 1, f"{text!r} is {ids}"
        return ids[0]

    for word in ("data", "value", "Paris"):
        assert name(one(" " + word)) == one(word)
        assert name(one(word)) == one(word)


@pytest.mark.real
def test_the_engine_knows_the_chat_templates_control_tokens(ngram, plain):
    """No prompt lookup draft crosses a control token (a copy of the prompt's last message
    ends where it did): the engine reads them from the vocabulary. SmolLM2's template marks
    its messages with ``<|im_start|>`` and ``<|im_end|>``, both control tokens; a word is
    not one. With speculation off nothing is read."""
    from hypnos.engines.llama.prompt import tokenize
    controls = ngram._spec.controls
    vocab = ngram._loop.vocab
    for marker in ("<|im_start|>", "<|im_end|>"):
        ids = tokenize(ngram._ll, vocab, marker, True)
        assert len(ids) == 1 and ids[0] in controls, (marker, ids)
    assert ngram._ll.llama_vocab_eos(vocab) in controls
    assert not set(tokenize(ngram._ll, vocab, " data value", False)) & controls
    assert plain._spec.controls == frozenset()
