"""Why a prompt missed (``engines/llama/parting``) and which slot a job takes when the prompt
cache holds a slot's tokens (``pick_slot``'s ``kept``): pure, no model."""
from __future__ import annotations

from hypnos.engines.llama.parting import AFTER, EXCERPT_CHARS, parting
from hypnos.engines.llama.slots import Slot, pick_slot


def render(tokens: list[int]) -> str:
    return " ".join(f"t{t}" for t in tokens)


def test_no_candidate_no_report():
    assert parting([1, 2, 3], [], render) is None
    assert parting([1, 2, 3], [[9, 9]], render) is None
    assert parting([1, 2, 3], [[-1, -1, -1]], render) is None    # media placeholders


def test_a_prompt_that_only_adds_to_the_cached_prefix_parted_nowhere():
    report = parting([1, 2, 3, 4, 5], [[1, 2, 3]], render)
    assert report == {"best_cached_prefix": 3, "parted_at": None}


def test_the_parting_names_the_token_and_shows_both_sides():
    cached = [1, 2, 3, 40, 41, 42]
    prompt = [1, 2, 3, 50, 51]
    report = parting(prompt, [[1, 7], cached], render)
    assert report["parted_at"] == 3 and report["best_cached_prefix"] == 3
    assert report["before"] == "t1 t2 t3"
    assert report["prompt"] == "t50 t51"
    assert report["cached"] == "t40 t41 t42"


def test_the_longest_candidate_wins_and_a_whole_one_on_a_tie():
    whole = [1, 2, 3]
    longer = [1, 2, 3, 8, 8]
    assert parting([1, 2, 3, 4], [longer, whole], render)["parted_at"] is None
    assert parting([1, 2, 3, 4], [[1, 2], longer], render)["parted_at"] == 3


def test_excerpts_are_bounded():
    cached = list(range(100, 100 + 5 * AFTER))
    prompt = list(range(200, 200 + 5 * AFTER))
    report = parting([0, *prompt], [[0, *cached]], lambda t: "y" * 1000)
    assert report["parted_at"] == 1
    assert all(len(report[k]) == EXCERPT_CHARS for k in ("before", "prompt", "cached"))


def slot(i: int, tokens: list[int], last_used: float) -> Slot:
    s = Slot(i, tokens=tokens)
    s.last_used = last_used
    return s


def test_with_no_match_a_slot_the_cache_holds_goes_before_the_least_recent():
    old = slot(0, [5] * 50, last_used=1.0)
    cached = slot(1, [6] * 50, last_used=2.0)
    prompt = [7] * 10
    assert pick_slot([old, cached], prompt) is old                    # no cache: LRU
    assert pick_slot([old, cached], prompt, kept=lambda s: s is cached) is cached
    empty = slot(2, [], last_used=3.0)
    assert pick_slot([old, cached, empty], prompt, kept=lambda s: False) is empty


def test_a_real_match_still_wins_over_a_slot_the_cache_holds():
    match = slot(0, [1, 2, 3, 4], last_used=1.0)
    cached = slot(1, [9] * 4, last_used=2.0)
    assert pick_slot([match, cached], [1, 2, 3, 4, 5], kept=lambda s: True) is match
