"""Cached prefixes that must not be lost by accident (issue #36), on the real SmolLM2-135M:
a context rebuilt larger keeps every slot's KV, and a prefill cancelled by its client keeps
what it evaluated, so the client's retry continues from there. Each checks the reported
cached tokens against the engine's own count of evaluated positions."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from conftest import SMOLLM2, require_smollm2
from near_tie import assert_same_or_a_near_tie

from hypnos.engines.records import ChatRequest, LoadSpec

# Small batches, so a prompt of a few hundred tokens takes several decode steps.
SPEC = LoadSpec("smollm2", SMOLLM2, context_len=1024, slots=2, threads=1,
                options={"n_batch": 64})
SYSTEM = ("You are the assistant of a small bakery. You answer questions about bread, cakes, "
          "opening hours and prices, politely and briefly. ") * 12
PROMPT = [{"role": "system", "content": SYSTEM},
          {"role": "user", "content": "What bread do you recommend for a picnic?"}]


def request(messages, max_tokens=6) -> ChatRequest:
    return ChatRequest(messages=messages, max_tokens=max_tokens, temperature=0, logprobs=True,
                       top_logprobs=2)


def ask(engine, messages, max_tokens=6):
    return engine.chat(request(messages, max_tokens), None, threading.Event())


@pytest.fixture(scope="module")
def engine():
    require_smollm2()
    from hypnos.engines.llama.engine import LlamaChatEngine
    eng = LlamaChatEngine()
    eng.load(SPEC)
    yield eng
    eng.unload()


@pytest.mark.real
def test_a_context_rebuilt_larger_keeps_the_cached_prefix(engine):
    """The scheduler rebuilds a resident model for a prompt its slot cannot hold (park,
    load larger, restore): the slots' KV goes along, so turn 2 evaluates only its new tail
    and answers as a cold run does."""
    engine.load(SPEC)
    first = ask(engine, PROMPT)
    turn2 = PROMPT + [{"role": "assistant", "content": first.text},
                      {"role": "user", "content": "And which cake for a birthday?"}]
    parked = engine.park()
    shared = parked.tokens
    assert shared >= first.prompt_tokens > 250
    bigger = dataclasses.replace(SPEC, context_len=2 * SPEC.context_len)
    engine.load(bigger)
    assert engine.n_ctx_per_slot == 2 * 512
    restored, _ = engine.restore(parked)
    assert restored == shared
    kept = ask(engine, turn2)
    assert kept.cached_tokens >= 0.95 * shared
    # Only the tail and the answer were evaluated (the last generated token is never fed).
    assert engine.evaluated_positions <= (kept.prompt_tokens - kept.cached_tokens
                                          + kept.completion_tokens)
    engine.load(bigger)                            # the same context, cold
    cold = ask(engine, turn2)
    assert cold.cached_tokens == 0 and engine.evaluated_positions >= cold.prompt_tokens
    assert_same_or_a_near_tie(cold, kept)


def wait_for(check, timeout=60.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


@pytest.mark.real
def test_a_cancelled_prefill_keeps_what_it_evaluated(engine):
    """A client that hangs up mid-prefill and sends the same prompt again: the retry
    reuses the positions the first prefill evaluated (not another slot from 0), and is
    charged only for the rest."""
    engine.load(SPEC)
    total = engine.prompt_tokens(request(PROMPT))
    assert total > 4 * SPEC.options["n_batch"]
    cancel = threading.Event()
    out: list = []
    worker = threading.Thread(target=lambda: out.append(
        engine.chat(request(PROMPT), None, cancel)))
    worker.start()
    wait_for(lambda: engine.evaluated_positions >= 2 * SPEC.options["n_batch"])
    cancel.set()
    worker.join(60)
    assert out and out[0].finish_reason == "cancelled" and out[0].completion_tokens == 0
    retry = ask(engine, PROMPT)                   # at once: the slot may still be stopping
    evaluated_before = engine.evaluated_positions - (
        retry.prompt_tokens - retry.cached_tokens + retry.completion_tokens - 1)
    assert 0 < retry.cached_tokens <= evaluated_before < total
    assert retry.cached_tokens >= 2 * SPEC.options["n_batch"]
