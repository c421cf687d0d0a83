"""The one comparison of two greedy answers that holds on any machine: token for token alike,
or parting first where the reference's two likeliest tokens were nearly tied. llama.cpp's sums
depend on the batch shape (a step with drafts, or with other slots, is another shape than one
request alone), so a near-tie may fall the other way; a real divergence may not. Both answers
need ``logprobs`` with ``top_logprobs`` of 2 or more."""
from __future__ import annotations

from hypnos.engines.llama.speculative.accept import NEAR_TIE

#: A gap between the two likeliest logprobs under this is a near-tie: what a batch shape
#: moves (0.3), and what a greedy verify may keep under the argmax on top (``NEAR_TIE``).
TIE = 0.3 + NEAR_TIE


def assert_same_or_a_near_tie(a, b) -> None:
    for x, y in zip(a.logprobs, b.logprobs, strict=False):
        if x.token != y.token:
            margin = x.top[0][2] - x.top[1][2]
            assert margin < TIE, f"diverged at {x.token!r}/{y.token!r}, margin {margin}"
            return
    # Alike as far as both go: one may only have ended first (its end token carries no
    # logprob to compare).
    assert a.text.startswith(b.text) or b.text.startswith(a.text)


#: Two logprobs of one token from the same distribution differ by rounding only: under this.
SAME_DISTRIBUTION = 0.05


def assert_same_draws_or_a_moved_draw(a, b) -> None:
    """Two seeded samples of one request: token for token alike, or parting first where both
    drew from the same distribution (each answer's top logprobs there agree within
    `SAME_DISTRIBUTION`): a batch shape's rounding moved a draw that landed at a boundary
    between two tokens, which no machine rules out. Parting where the distributions differ
    (a draft kept that the target would not have drawn, a sampler fed out of order) fails."""
    for i, (x, y) in enumerate(zip(a.logprobs, b.logprobs, strict=False)):
        if x.token != y.token:
            ours = {t: lp for t, _, lp in x.top}
            theirs = {t: lp for t, _, lp in y.top}
            shared = ours.keys() & theirs.keys()
            assert shared, f"parted at token {i} with no likely token in common"
            worst = max(abs(ours[t] - theirs[t]) for t in shared)
            assert worst < SAME_DISTRIBUTION, f"parted at token {i}: distributions differ " \
                                              f"by {worst}"
            return
    assert a.text.startswith(b.text) or b.text.startswith(a.text)
