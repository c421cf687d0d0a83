"""The one comparison of two greedy answers that holds on any machine: token for token alike,
or parting first where the reference's two likeliest tokens were nearly tied. llama.cpp's sums
depend on the batch shape (a step with drafts, or with other slots, is another shape than one
request alone), so a near-tie may fall the other way; a real divergence may not. Both answers
need ``logprobs`` with ``top_logprobs`` of 2 or more."""
from __future__ import annotations

#: A gap between the two likeliest logprobs under this is a near-tie.
TIE = 0.3


def assert_same_or_a_near_tie(a, b) -> None:
    for x, y in zip(a.logprobs, b.logprobs, strict=False):
        if x.token != y.token:
            margin = x.top[0][2] - x.top[1][2]
            assert margin < TIE, f"diverged at {x.token!r}/{y.token!r}, margin {margin}"
            return
    # Alike as far as both go: one may only have ended first (its end token carries no
    # logprob to compare).
    assert a.text.startswith(b.text) or b.text.startswith(a.text)
