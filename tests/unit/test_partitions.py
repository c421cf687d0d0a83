"""Prefix reuse and speculation by key (issue 35), pure parts: a slot of another partition is
never picked for its prefix and scores as holding nothing; prompt lookup drafts from its own
partition's answers only, one partition when keys are off, a bounded number of them."""
from __future__ import annotations

from hypnos.engines.llama.slots import Slot, pick_slot
from hypnos.engines.llama.speculative import choose, drafts
from hypnos.engines.llama.speculative.choose import SpecConfig, Speculation

PROMPT = list(range(100, 190))


def test_a_foreign_slot_is_never_picked_for_its_prefix():
    alices = Slot(0, tokens=list(PROMPT), last_used=9.0, partition="alice")
    stale = Slot(1, tokens=[7, 8, 9], last_used=1.0, partition="bob")
    # Alice's prompt again: her slot, for its 90-token prefix.
    assert pick_slot([alices, stale], PROMPT, "alice") is alices
    # Bob's same prompt: Alice's slot counts as holding nothing, so the least recently used
    # slot is taken, as for any prompt nothing matches.
    assert pick_slot([alices, stale], PROMPT, "bob") is stale
    assert pick_slot([stale, alices], PROMPT, "bob") is stale
    assert alices.prefix_for(PROMPT, "bob") == 0
    assert alices.prefix_for(PROMPT, "alice") == len(PROMPT)


def test_a_foreign_slot_scores_like_an_empty_one():
    # Only foreign slots: the choice is the one it would be were they all empty (the least
    # recently used), whatever prefix they hold.
    long_match = Slot(0, tokens=list(PROMPT), last_used=5.0, partition="alice")
    no_match = Slot(1, tokens=[1, 2, 3], last_used=2.0, partition="alice")
    assert pick_slot([long_match, no_match], PROMPT, "bob") is no_match
    assert pick_slot([long_match, no_match], PROMPT, "alice") is long_match
    # Keys off: one partition ("") reuses every slot's prefix as before.
    shared = Slot(0, tokens=list(PROMPT), last_used=5.0)
    assert pick_slot([shared, Slot(1)], PROMPT) is shared


def answered(spec: Speculation, partition: str, prompt: list[int], answer: list[int]) -> None:
    """A finished ngram job of ``partition``: its drafter saw the whole context, then closed
    (which pools its prompt's end and its answer)."""
    drafter, _, _ = spec.for_job(None, len(prompt), "text", partition)
    drafter.propose(prompt + answer, 4)
    drafter.close()


def drafts_for(spec: Speculation, partition: str, context: list[int]) -> list[int]:
    drafter, _, _ = spec.for_job(None, len(context), "text", partition)
    return drafter.propose(context, 64)


def test_an_answer_drafts_for_its_own_partition_only(monkeypatch):
    # The window a drafter starts with is widened to the step's whole budget: what is drafted
    # is the point here, not how much of it a first step may take.
    monkeypatch.setattr(drafts, "LOOKUP_WINDOW", 64)
    spec = Speculation(SpecConfig("ngram", n_max=64), can_rollback=True)
    answer = list(range(10, 80))
    answered(spec, "alice", PROMPT, answer)
    # The same prompt again: Alice's old answer is her draft; Bob's context, built from her
    # prompt and the start of her answer, drafts nothing (his context never repeats itself).
    assert drafts_for(spec, "alice", PROMPT) == answer[:64]
    assert drafts_for(spec, "bob", PROMPT) == []
    assert drafts_for(spec, "bob", PROMPT + answer[:30]) == []
    assert drafts_for(spec, "alice", PROMPT + answer[:30]) == answer[30:]
    assert spec.of("alice").pool is not spec.of("bob").pool


def test_with_keys_off_every_request_shares_one_pool(monkeypatch):
    monkeypatch.setattr(drafts, "LOOKUP_WINDOW", 64)
    spec = Speculation(SpecConfig("ngram", n_max=64), can_rollback=True)
    answer = list(range(10, 80))
    answered(spec, "", PROMPT, answer)
    assert drafts_for(spec, "", PROMPT) == answer[:64]
    assert list(spec.learnt) == [""]


def test_auto_weighs_each_partitions_figures_apart():
    spec = Speculation(SpecConfig("auto", n_max=8), can_rollback=True)
    alice, _, _ = spec.for_job(None, 10, "text", "alice")
    bob, _, _ = spec.for_job(None, 10, "text", "bob")
    again, _, _ = spec.for_job(None, 10, "text", "alice")
    assert alice.stats is again.stats and alice.stats is not bob.stats


def test_partitions_are_bounded_least_recent_first(monkeypatch):
    monkeypatch.setattr(choose, "PARTITIONS", 3)
    spec = Speculation(SpecConfig("ngram", n_max=64), can_rollback=True)
    answered(spec, "a", PROMPT, list(range(10, 80)))
    first = spec.of("a")
    for name in ("b", "c", "a", "d"):          # "a" used again: "b" is the oldest
        spec.of(name)
    assert list(spec.learnt) == ["c", "a", "d"] and spec.learnt["a"] is first
    spec.of("e")
    spec.of("f")
    assert "a" not in spec.learnt and drafts_for(spec, "a", PROMPT) == []
