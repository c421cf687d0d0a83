"""Speculative decoding's pure parts: the n-gram and prediction drafters, and the acceptance
rules on fixed distributions (issue 30)."""
from __future__ import annotations

import numpy as np
import pytest

from hypnos.engines.llama.speculative import SpecStats
from hypnos.engines.llama.speculative.accept import (NEAR_TIE, accepted_prefix,
                                                     greedy_or_drafted, point_mass, residual,
                                                     sample_compare_step, speculative_step)
from hypnos.engines.llama.speculative import drafts
from hypnos.engines.llama.speculative.drafts import (AnswerPool, LookupFirst, NgramDrafter,
                                                     PredictionDrafter)
from hypnos.engines.llama.speculative.ngram_index import NgramIndex


# ------------------------------------------------------------------ n-gram lookup

def test_ngram_drafts_twice_the_match_of_what_followed_within_its_window():
    d = NgramDrafter()
    head = [1, 2, 3, 4, 5]
    ctx = head + [6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] + [0] + head
    # The last 5 tokens occurred once before: 5 matched, so up to 10 follow; the first
    # draft is the window's 4, each draft taken whole doubles it.
    assert d.propose(ctx, 64) == [6, 7, 8, 9]
    assert d.propose(ctx, 3) == [6, 7, 8]
    assert d.propose(ctx, 0) == []
    d.on_accept(4, 4)
    assert d.propose(ctx, 64) == [6, 7, 8, 9, 10, 11, 12, 13]
    d.on_accept(8, 8)
    assert d.propose(ctx, 64) == [6, 7, 8, 9, 10, 11, 12, 13, 14, 15]    # 2 x the match
    d.on_accept(10, 3)                               # refused: back to the first window
    assert d.propose(ctx, 64) == [6, 7, 8, 9]


def test_the_window_grows_to_its_cap_and_a_plain_step_leaves_it():
    d = NgramDrafter()
    for _ in range(10):
        d.on_accept(d.window, d.window)
    assert d.window == drafts.LOOKUP_WINDOW_MAX
    d.on_accept(0, 0)
    assert d.window == drafts.LOOKUP_WINDOW_MAX
    d.on_accept(64, 63)
    assert d.window == drafts.LOOKUP_WINDOW


def test_ngram_needs_the_minimum_match():
    # 4 tokens match: no draft.
    assert NgramDrafter().propose([1, 2, 3, 4, 9, 9, 1, 2, 3, 4], 8) == []
    assert NgramDrafter().propose([1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 5], 8) == [9, 1, 2, 3]
    assert NgramDrafter().propose([1, 2, 3], 8) == []


def test_ngram_prefers_the_place_that_matches_longest():
    # [1..5] occurs twice before the end: after 9 (6 tokens match with the end's 9) and,
    # later, after 7 (only 5 match): the longer match wins although it is older.
    ctx = [9, 1, 2, 3, 4, 5, 20, 21, 7, 1, 2, 3, 4, 5, 30, 31, 9, 1, 2, 3, 4, 5]
    assert NgramDrafter().propose(ctx, 2) == [20, 21]
    # Equal matches: only what every place agrees on is drafted.
    ctx = [1, 2, 3, 4, 5, 20, 1, 2, 3, 4, 5, 30, 1, 2, 3, 4, 5]
    assert NgramDrafter().propose(ctx, 1) == []
    ctx = [1, 2, 3, 4, 5, 20, 21, 7, 1, 2, 3, 4, 5, 20, 22, 8, 1, 2, 3, 4, 5]
    assert NgramDrafter().propose(ctx, 4) == [20]


def test_ngram_a_match_longer_than_the_cap_is_measured_to_the_cap():
    idx = NgramIndex()
    idx.sync(list(range(100)) + list(range(100)))
    assert idx.longest_match(cap=64) == (64, 100)


def test_ngram_index_extends_and_rebuilds():
    idx = NgramIndex(n=2)
    idx.sync([1, 2, 3])
    idx.sync([1, 2, 3, 1, 2])
    assert idx.longest_match() == (2, 2)
    idx.sync([4, 4, 1, 2])                           # not an extension: rebuilt
    assert idx.longest_match() == (0, -1)
    assert (2, 3) not in idx.ends


def test_ngram_refused_drafts_raise_the_match_it_needs():
    ctx = [1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 5, 6, 7]    # 7 tokens match
    d = NgramDrafter(prompt_len=len(ctx))            # all prompt: no gapped match
    assert d.propose(ctx, 4) == [8, 0, 1, 2]
    d.on_accept(4, 0)
    assert d.propose(ctx, 4) == [8, 0, 1, 2]         # half the share is still the floor
    d.on_accept(4, 0)                                # refused again: under the floor, 10
    assert d.propose(ctx, 4) == []                   # matching tokens are needed now
    d.on_accept(0, 0)                                # a plain step changes nothing
    assert d.propose(ctx, 4) == []
    for _ in range(3):
        d.on_accept(4, 4)
    assert d.propose(ctx, 4) == [8, 0, 1, 2]


def test_a_record_drafts_what_followed_the_last_one_past_a_value_that_differs():
    """Structured output from prose: a key (the anchor), a value that differs each record,
    then the same syntax. After the value's closing token the draft is what followed the
    earlier record's value, though no 5 tokens in a row match."""
    key, close, next_key = [101, 102, 103], [104], [105, 106, 107]
    first = [1, 2] + key + [50, 51] + close + next_key + [60] + [108]
    ctx = first + [9, 9] + key + [70] + close
    assert NgramDrafter().propose(ctx, 64) == [105, 106, 107, 60]     # the window's 4
    idx = NgramIndex()
    idx.sync(ctx)
    assert idx.gapped_matches() == (3, [len([1, 2] + key + [50, 51] + close)])
    # A value longer than GAP_MAX, a different closing token or a 2-token anchor: no draft.
    assert NgramDrafter().propose(first + [9, 9] + key + [70, 71, 72, 73] + close, 64) == []
    assert NgramDrafter().propose(first + [9, 9] + key + [70] + [99], 64) == []
    assert NgramDrafter().propose(first + [9, 9] + key[1:] + [70] + close, 64) == []


def test_a_third_record_drafts_its_keys_but_not_the_values_of_the_first_two():
    key, close, other = [101, 102, 103, 104, 105], [106], [107, 108, 109]
    ctx = [1] + key + [50] + close + other + [2] + key + [60] + close + other + [3] + key
    assert NgramDrafter().propose(ctx, 64) == []         # 50 or 60: the places disagree
    assert NgramDrafter().propose(ctx + [70] + close, 64) == other    # then they agree


def test_a_gapped_match_is_a_guess_and_refused_drafts_raise_its_bar():
    key, close = [101, 102, 103], [104]
    ctx = [1, 2] + key + [50] + close + [105, 106] + [9, 9] + key + [70] + close
    d = NgramDrafter()
    for _ in range(2):
        assert d.propose(ctx, 64) == [105, 106, 9, 9]
        d.on_accept(4, 0)                            # refused twice: under the floor
    assert d.propose(ctx, 64) == []                  # 6 anchor tokens needed now
    long_key = [110, 111, 112, 101, 102, 103]
    ctx = [1] + long_key + [50] + close + [105, 106] + [9] + long_key + [70] + close
    assert d.propose(ctx, 64)[:2] == [105, 106]
    # Its misses are its own: the window and the bar of exact copies are untouched.
    assert d.window == drafts.LOOKUP_WINDOW and d.share == 1.0
    copy = [1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 5, 6, 7]
    assert d.propose(copy, 64) == [8, 0, 1, 2]


def test_an_answer_written_before_is_drafted_from_the_pool():
    pool = AnswerPool()
    prompt = list(range(90, 110))
    answer = list(range(10, 80))
    first = NgramDrafter(pool=pool, prompt_len=len(prompt))
    first.propose(prompt + answer, 4)
    first.close()                      # its job ended: its prompt's end and answer are pooled
    again = NgramDrafter(pool=pool, prompt_len=len(prompt))
    # The same prompt again: the old answer is the draft from the first token, though it is
    # in no part of this context; the window's 4 first, then twice as many after each draft
    # taken whole; never past the answer's end.
    at = 0
    for window in (4, 8, 16, 32, 64):
        draft = again.propose(prompt + answer[:at], 64)
        assert draft == answer[at:at + window], window
        again.on_accept(len(draft), len(draft))
        at += len(draft)
    assert at == len(answer)
    # Another prompt ending in the same 8 tokens (a chat template's end) drafts nothing.
    other = NgramDrafter(pool=pool, prompt_len=10)
    assert other.propose([1, 2, 3] + prompt[-8:], 64) == []


def test_the_own_context_wins_unless_the_pool_matches_longer():
    pool = AnswerPool()
    pool.add([3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 70, 71])
    tail = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    ctx = tail + [50, 51, 0, 4] + tail
    assert NgramDrafter(pool=pool).propose(ctx, 2) == [70, 71]      # 12 in the pool, 11 here
    pool = AnswerPool()
    pool.add([1, 1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 70, 71])
    assert NgramDrafter(pool=pool).propose(ctx, 2) == [50, 51]      # 11 both: the context's


def test_the_pool_keeps_its_newest_answers_within_its_size(monkeypatch):
    monkeypatch.setattr(drafts, "POOL_TOKENS", 40)
    pool = AnswerPool()
    for base in (100, 200, 300):
        pool.add(list(range(base, base + 15)))
    assert len(pool.index.tokens) <= 40 and pool.index.tokens[-15:] == list(range(300, 315))
    assert pool.continuation(list(range(300, 312)), 5, 3)[:2] == (12, [312, 313, 314])
    assert pool.continuation(list(range(300, 311)), 5, 3)[:2] == (0, [])  # under 12 tokens
    assert pool.continuation(list(range(100, 112)), 5, 3)[:2] == (0, [])  # dropped
    pool.add([1, 2])                                                    # too short to index
    assert pool.index.tokens[-1] == 314


def test_a_job_that_left_an_earlier_answer_takes_it_up_on_a_short_match():
    """Asked again, the answer leaves the pooled one for a word (another near tie), then
    goes on as before: 5 matching tokens take the pool up again near where it was left,
    where a job that never followed it needs 12."""
    answer = list(range(100, 300))
    pool = AnswerPool()
    pool.add(answer)
    prompt = [7] * 3 + answer[:12]                   # the answer's start, as a context
    d = NgramDrafter(pool=pool, prompt_len=3)
    assert d.propose(prompt, 8) == answer[12:16] and d.sort == "pool"   # the first window
    d.on_accept(4, 2)                                # 112, 113 kept, then another word
    back = prompt + answer[12:14] + [900, 901] + answer[16:21]
    assert d.propose(back, 8) == answer[21:25] and d.sort == "pool"
    assert NgramDrafter(pool=pool, prompt_len=3).propose(back, 8) == []
    d.on_accept(4, 2)
    far = back + answer[21:23] + [902] + answer[190:195]   # 70 tokens on: not taken up
    assert d.propose(far, 8) == []


class Guesser:
    """A model drafter's stand-in for the pure test: guesses ``n`` zeros, notes its figures."""
    method = "draft"

    def __init__(self):
        self.asked, self.told = [], []

    def propose(self, context, n_max):
        self.asked.append(n_max)
        return [0] * n_max

    def on_accept(self, drafted, accepted, step_s=0.0):
        self.told.append((drafted, accepted))

    def close(self):
        pass


def test_lookup_first_copies_where_it_can_and_the_model_guesses_elsewhere():
    model = Guesser()
    d = LookupFirst(model, n_model=3)
    copy = [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5]
    assert d.propose(copy, 64) == [6, 7, 8, 9] and model.asked == []     # the window's 4
    d.on_accept(4, 4)
    assert model.told == []                          # the lookup's figures stay its own
    assert d.propose(copy + [6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 42], 64) == [0, 0, 0]
    assert model.asked == [3]                        # the model drafts at most n_model
    d.on_accept(3, 1)
    d.on_accept(0, 0)                                # a plain step: the model's
    assert model.told == [(3, 1), (0, 0)]


# ------------------------------------------------------------------ predicted outputs

def test_prediction_follows_the_answer():
    pred = [10, 11, 12, 13, 14, 15]
    d = PredictionDrafter(pred, prompt_len=2)
    assert d.propose([0, 0], 3) == [10, 11, 12]
    assert d.propose([0, 0, 10, 11], 3) == [12, 13, 14]
    assert d.propose([0, 0, 10, 11, 12, 13, 14, 15], 3) == []


def test_prediction_resyncs_after_a_changed_token():
    # The answer renames 12 to 99 and goes on as predicted from 13.
    pred = [10, 11, 12, 13, 14, 15, 16]
    d = PredictionDrafter(pred, prompt_len=0)
    assert d.propose([10, 11], 2) == [12, 13]
    assert d.propose([10, 11, 99], 2) == []          # 99 is not in the prediction
    assert d.propose([10, 11, 99, 13], 2) == [14, 15]


def test_prediction_resync_prefers_the_nearest_place_forward():
    # "5" occurs at index 1 and index 6; having followed the prediction up to index 4,
    # a mismatch then "5" resyncs after index 6, not after index 1.
    pred = [4, 5, 1, 2, 3, 8, 5, 6]
    d = PredictionDrafter(pred, prompt_len=0)
    d.propose([4, 5, 1, 2, 3], 1)
    assert d.propose([4, 5, 1, 2, 3, 9, 5], 1) == [6]


def test_a_prediction_drafts_a_few_after_a_refusal_and_doubles_while_it_holds():
    pred = list(range(100, 200))
    d = PredictionDrafter(pred, prompt_len=1)
    assert len(d.propose([0], 32)) == 8              # no evidence yet: a few
    d.on_accept(8, 8)
    assert d.propose([0] + pred[:9], 32) == pred[9:25]    # taken whole: twice as many
    d.on_accept(16, 16)
    assert len(d.propose([0] + pred[:26], 32)) == 32      # up to the n_max it runs with
    d.on_accept(32, 3)                                    # refused inside: a few again
    assert len(d.propose([0] + pred[:30], 32)) == 8
    d.on_accept(0, 0)                                     # a plain step changes nothing
    assert len(d.propose([0] + pred[:30], 32)) == 8


def test_prediction_of_nothing_drafts_nothing():
    d = PredictionDrafter([], prompt_len=0)
    assert d.propose([1, 2, 3], 4) == []


# ------------------------------------------------------------------ acceptance

def test_accepted_prefix_is_the_greedy_exact_match():
    assert accepted_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert accepted_prefix([1, 2, 3], [1, 5, 3, 4]) == 1
    assert accepted_prefix([1, 2, 3], [7, 2, 3, 4]) == 0
    assert accepted_prefix([], [7]) == 0


def test_greedy_keeps_a_drafted_token_within_the_near_tie_and_the_argmax_past_it():
    logits = np.array([1.0, 3.0, 3.0 - NEAR_TIE, 3.0 - NEAR_TIE - 0.01, 2.9], dtype=np.float32)
    assert greedy_or_drafted(logits, 1) == 1                  # the argmax drafted
    assert greedy_or_drafted(logits, 4) == 4                  # 0.1 under it
    assert greedy_or_drafted(logits, 2) == 2                  # exactly the tolerance under
    assert greedy_or_drafted(logits, 3) == 1                  # past it: the argmax
    assert greedy_or_drafted(logits, 0) == 1
    assert greedy_or_drafted(logits, 4, tolerance=0.0) == 1   # exact greedy
    tied = np.array([2.0, 5.0, 5.0], dtype=np.float32)
    assert greedy_or_drafted(tied, 0, tolerance=0.0) == 1     # the first on a tie
    assert greedy_or_drafted(tied, 2, tolerance=0.0) == 2     # a tie with the draft keeps it


def test_residual_removes_the_draft_and_renormalises():
    p = np.array([0.5, 0.3, 0.2])
    r = residual(p, point_mass(3, 0))
    assert np.allclose(r, [0.0, 0.6, 0.4])
    assert np.allclose(residual(p, p), p)           # nothing left: p itself


def _frequencies(step, n_trials: int, n: int) -> np.ndarray:
    counts = np.zeros(n)
    for token in step(n_trials):
        counts[token] += 1
    return counts / n_trials


P = np.array([0.45, 0.25, 0.15, 0.10, 0.05])
Q = np.array([0.10, 0.50, 0.10, 0.20, 0.10])
TRIALS = 20000
TOL = 0.015           # about 4 standard errors at these sizes


def test_speculative_sampling_keeps_the_targets_distribution():
    rng = np.random.default_rng(7)

    def trials(k):
        for _ in range(k):
            x = int(rng.choice(len(Q), p=Q))
            yield speculative_step(P, Q, x, rng)[1]
    assert np.abs(_frequencies(trials, TRIALS, len(P)) - P).max() < TOL


def test_speculative_sampling_accepts_at_the_expected_rate():
    # The acceptance rate of speculative sampling is sum(min(p, q)).
    rng = np.random.default_rng(11)
    accepted = 0
    for _ in range(TRIALS):
        x = int(rng.choice(len(Q), p=Q))
        accepted += speculative_step(P, Q, x, rng)[0]
    assert abs(accepted / TRIALS - np.minimum(P, Q).sum()) < TOL


@pytest.mark.parametrize("x", [0, 3])
def test_a_point_mass_draft_sample_and_compare_is_speculative_sampling(x):
    # For a deterministic draft x the full rule and "sample t ~ p, keep x iff t == x" give
    # the same token distribution (p) and the same acceptance rate (p(x)).
    rng = np.random.default_rng(3 + x)
    q = point_mass(len(P), x)
    full = [speculative_step(P, q, x, rng) for _ in range(TRIALS)]
    compare = [sample_compare_step(P, x, rng) for _ in range(TRIALS)]
    for outcomes in (full, compare):
        tokens = np.bincount([t for _, t in outcomes], minlength=len(P)) / TRIALS
        assert np.abs(tokens - P).max() < TOL
        assert abs(sum(a for a, _ in outcomes) / TRIALS - P[x]) < TOL
        assert all(t == x for a, t in outcomes if a)
        assert all(t != x for a, t in outcomes if not a)


def test_stats_count_rejections():
    s = SpecStats("ngram", 4, drafted=10, accepted=7)
    assert s.rejected == 3
    assert s.to_wire() == {"method": "ngram", "drafted": 10, "accepted": 7, "n_max": 4}


# ------------------------------------------------------------------ across a respelling

# A toy vocabulary: 10 is " Am", 20 is "Am"; 11 "ara", 12 " Ok", 13 "af", 14 "or";
# 30 is " data", 31 "data"; 40 is ' "', 41 '": "', 42 '",'.
PIECES = {10: b" Am", 20: b"Am", 11: b"ara", 12: b" Ok", 13: b"af", 14: b"or",
          30: b" data", 31: b"data", 40: b' "', 41: b'": "', 42: b'",', 50: b" x"}
SINGLE = {v: k for k, v in PIECES.items()}


def spelling():
    from hypnos.engines.llama.speculative.respelled import Spelling
    return Spelling(lambda t: PIECES.get(t, b"?"), SINGLE.get)


def test_spelling_names_a_spaced_token_by_its_bare_twin():
    name = spelling()
    assert name(10) == 20 and name(20) == 20          # " Am" and "Am" are one name
    assert name(30) == 31 and name(12) == 12          # "Ok" alone is not a token here
    assert name(41) == 41 and name(-1) == -1          # no leading space; the separator
    assert name.names[10] == 20                       # looked up once, then kept


def test_a_value_copied_without_its_space_drafts_the_rest_of_it():
    """The prose says " Am ara Ok af or"; the JSON writes '": "Am ara' (no space before
    Am): by name the last two tokens agree with the prompt's, so the rest of the name is
    the draft (within the window of 4)."""
    prompt = [1, 2, 10, 11, 12, 13, 14, 3, 4, 5, 6]
    answer = [7, 8, 9, 41, 20, 11]
    d = NgramDrafter(prompt_len=len(prompt), spelling=spelling())
    assert d.propose(prompt + answer, 64) == [12, 13, 14, 3]
    assert d.spelled
    # Without the vocabulary's names nothing matches.
    assert NgramDrafter(prompt_len=len(prompt)).propose(prompt + answer, 64) == []


def test_one_token_alone_or_a_common_one_drafts_nothing():
    prompt = [1, 2, 10, 11, 12, 13, 14, 3, 4, 5, 6]
    d = NgramDrafter(prompt_len=len(prompt), spelling=spelling())
    assert d.propose(prompt + [7, 8, 9, 41, 11], 64) == []       # "ara" after '": "'
    common = [1, 10, 11, 2, 10, 11, 3, 10, 11, 4, 10, 11, 5, 10, 11, 6]  # 5 places
    d = NgramDrafter(prompt_len=len(common), spelling=spelling())
    assert d.propose(common + [7, 8, 41, 20, 11], 64) == []
    assert not d.spelled


def test_respelled_drafts_keep_their_own_share():
    """Refused drafts of this kind raise its own bar (a third token must agree) and leave
    the exact copies' window alone."""
    prompt = [1, 2, 10, 11, 12, 13, 14, 3, 4, 5, 6]
    answer = [7, 8, 9, 41, 20, 11]
    d = NgramDrafter(prompt_len=len(prompt), spelling=spelling())
    for _ in range(2):
        draft = d.propose(prompt + answer, 64)
        assert draft
        d.on_accept(len(draft), 0)
    assert d.respelled_share < drafts.FLOOR and d.share == 1.0
    assert d.window == drafts.LOOKUP_WINDOW
    assert d.propose(prompt + answer, 64) == []                  # '": "' is not " Am"'s
    assert d.propose(prompt + [7, 8, 9, 2, 20, 11], 64) == [12, 13, 14, 3]   # 3 agree


def test_lookup_first_passes_the_spelling_on():
    prompt = [1, 2, 10, 11, 12, 13, 14, 3, 4, 5, 6]

    class Model:
        method = "draft"

        def propose(self, context, n_max):
            return [99]

    first = LookupFirst(Model(), 2, prompt_len=len(prompt), spelling=spelling())
    assert first.propose(prompt + [7, 8, 9, 41, 20, 11], 64) == [12, 13, 14, 3]
    assert first.copied
