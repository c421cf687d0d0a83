"""Acceptance rules of speculative decoding, pure (numpy arrays in, decisions out).

The decode loop uses ``accepted_prefix`` through "sample the target's token at each drafted
position and compare": for a deterministic draft (n-grams, a prediction, a greedy draft
model) the draft distribution q is a point mass, and the speculative-sampling rule (accept x
with probability min(1, p(x)/q(x)), else sample from normalize(max(0, p - q))) then reads
"accept x with probability p(x), else sample from p with x removed" -- which is exactly the
distribution of "sample t ~ p; keep x iff t == x, else keep t". ``speculative_step`` is the
general rule, for a drafter that samples its tokens (q not a point mass).
"""
from __future__ import annotations

import numpy as np

#: How far under the argmax's logit a drafted token's may lie and still be kept by a plain
#: greedy job. llama.cpp's CPU sums depend on the batch shape: between a step of one token and
#: one of four or more (a verify with drafts, other slots in the batch), the gap between the
#: two likeliest logits of Qwen2.5-Coder-0.5B moved by 0.25-0.26 at the 99th percentile
#: (0.49 at most) over 1,049 positions, and the argmax changed at 1 % of them
#: (``bench/near_ties.py``). Under this, which token is the argmax is the batch shape's
#: choice, not the model's; the draft's keeps the answer on what was drafted (a question
#: asked again, a file returned, a prediction).
NEAR_TIE = 0.25


def greedy_or_drafted(logits: np.ndarray, drafted: int, tolerance: float = NEAR_TIE) -> int:
    """A plain greedy job's token at a drafted position: ``drafted`` where its logit lies
    within ``tolerance`` of the largest, else the argmax (the first on a tie)."""
    best = int(logits.argmax())
    return drafted if logits[best] - logits[drafted] <= tolerance else best


def accepted_prefix(draft: list[int], target: list[int]) -> int:
    """How many leading draft tokens the target agrees with (greedy exact match).
    ``target[i]`` is the token the target picked at draft position i."""
    n = 0
    for d, t in zip(draft, target, strict=False):
        if d != t:
            break
        n += 1
    return n


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """normalize(max(0, p - q)): where to sample after a rejection. When p <= q everywhere
    (only if p == q) the residual is empty and p itself is returned."""
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0 else p


def point_mass(n: int, x: int) -> np.ndarray:
    q = np.zeros(n)
    q[x] = 1.0
    return q


def speculative_step(p: np.ndarray, q: np.ndarray, x: int, rng: np.random.Generator
                     ) -> tuple[bool, int]:
    """One drafted position: ``x`` was drawn from ``q``; ``p`` is the target's distribution.
    Returns (accepted, token): (True, x) with probability min(1, p(x)/q(x)), else (False, t)
    with t drawn from ``residual(p, q)``. The token's distribution is p whatever q is."""
    if q[x] > 0 and rng.random() < min(1.0, p[x] / q[x]):
        return True, x
    r = residual(p, q)
    return False, int(rng.choice(len(p), p=r))


def sample_compare_step(p: np.ndarray, x: int, rng: np.random.Generator) -> tuple[bool, int]:
    """The decode loop's rule for a point-mass draft ``x``: t ~ p, accepted iff t == x."""
    t = int(rng.choice(len(p), p=p))
    return t == x, t
