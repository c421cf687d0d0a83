"""One key's prompts and answers never serve another key (issue 35), through a real
`hypnos serve` and the official `openai` client on SmolLM2-135M with prompt lookup on and a
single slot (every request takes the KV the previous one left): a prefix Alice cached is
reused by Alice and never by Bob, on /v1/chat/completions and /v1/completions; prompt lookup
never drafts Bob's answer from Alice's.

Why Bob's ``drafted == 0`` holds whatever the model writes: with ``max_tokens = 3`` a draft
can only follow the prompt itself or the prompt and the first answer token; both contexts end
in the chat template's assistant header (then that token), which a one-turn prompt holds
nowhere earlier. His own context can never match; only a pool holding Alice's same prompt and
the answer after it could.
"""
from __future__ import annotations

import openai
import pytest

from model_dirs import keyed_server, serve

pytestmark = [pytest.mark.real]
KEYS = {"admin": "sk-partition-admin", "alice": "sk-partition-alice", "bob": "sk-partition-bob"}
CONFIG = keyed_server(KEYS["admin"], alice=KEYS["alice"], bob=KEYS["bob"]) + """
[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
context_len = 2048
slots = 1
speculative = "ngram"
initial_tier = "tier1_gpu_vram"
"""
LONG = ("Here are the minutes of the harbour committee. The ferry timetable changes in May, "
        "the north pier gets new lights, the fish market opens an hour earlier on Fridays "
        "and the parking fees stay as they are. Summarise them in one line.")
QUESTION = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = serve(tmp_path_factory.mktemp("partition"), CONFIG, smol=True)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def clients(server) -> dict[str, openai.OpenAI]:
    return {who: openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0,
                               timeout=120) for who, key in KEYS.items()}


def chat(client: openai.OpenAI, content: str, max_tokens: int = 1):
    return client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": content}], max_tokens=max_tokens,
        temperature=0)


def cached(resp) -> int:
    return resp.usage.prompt_tokens_details.cached_tokens


def test_a_cached_prefix_serves_only_the_key_that_sent_it(clients):
    alice, bob = clients["alice"], clients["bob"]
    chat(alice, LONG)
    again = chat(alice, LONG)
    assert cached(again) > again.usage.prompt_tokens // 2      # her own prefix is reused
    first = chat(bob, LONG)
    assert cached(first) == 0                                   # Alice's KV was there
    second = chat(bob, LONG)
    assert cached(second) > 0                                   # his own is reused
    # The raw-prompt route: the same rule.
    prompt = "The harbour committee met on Tuesday and decided that"
    alice.completions.create(model="smol", prompt=prompt, max_tokens=1, temperature=0)
    mine = alice.completions.create(model="smol", prompt=prompt, max_tokens=1, temperature=0)
    assert cached(mine) > 0
    theirs = bob.completions.create(model="smol", prompt=prompt, max_tokens=1, temperature=0)
    assert cached(theirs) == 0


def test_prompt_lookup_never_drafts_from_another_keys_answer(clients):
    alice, bob = clients["alice"], clients["bob"]
    answer = chat(alice, QUESTION, max_tokens=6)
    assert answer.model_extra["hypnos_telemetry"]["speculative"]["method"] == "ngram"
    assert answer.usage.completion_tokens >= 3    # her answer goes on past Bob's draft step
    probe = chat(bob, QUESTION, max_tokens=3)
    spec = probe.model_extra["hypnos_telemetry"]["speculative"]
    assert spec["method"] == "ngram" and spec["drafted"] == 0 and spec["accepted"] == 0
