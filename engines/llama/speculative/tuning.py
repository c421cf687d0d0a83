"""``speculative = "auto"``: draft only where it pays, measured per model and kind of request.

The model is the one that decides speculation's worth on any hardware: a decode step with k
drafted tokens costs ``plain + k * per_draft`` seconds (verifying k extra positions), or what
steps of exactly k drafts were measured to cost once ``SIZE_READINGS`` of them were (a CPU's
matrix kernels work on columns in groups, so a batch of 4 positions may cost less than one of
3: Qwen2.5-Coder-0.5B on 2 AVX2 cores, ``bench/spec_step_costs.py``), and yields
``(1 - a^(k+1)) / (1 - a)`` tokens on average, ``a`` being the chance that a drafted token is
accepted (each step stops at the first rejection). ``best_k`` picks the k in 1..n_max with
the most tokens per second, and none when no k beats plain decoding by
``MARGIN``; then only one step in ``PROBE_EVERY`` drafts, which keeps the figures fresh at a
bounded cost (about 1/PROBE_EVERY of a slow-down at worst). ``KindStats`` holds the running
figures (exponential averages), ``AutoDrafter`` wraps a drafter with them. Pure but for the
clock readings the decode loop hands in.

A drafter with guesses of several sorts says which one it drafted (``sort``: prompt
lookup's records past a differing value, "gapped", values copied without their space,
"spelled", and copies taken up past an edit, "edited"; "" for its main one). Those guesses
are taken far less often than copies (about half, against nine in ten: the fresh prompt set
replayed, ``bench/spec_replay.py``), so each keeps an acceptance of its own
(``SortFigures``, by sort) and is drafted only as far as that pays on the measured costs:
where a drafted position is nearly free (a GPU) they all draft, where it costs half a step
(a few CPU cores) only the copies do.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hypnos.engines.llama.speculative import Drafter, Plan

#: Drafting must promise this much more speed than plain steps.
MARGIN = 1.05
#: With drafting judged not to pay, one step in this many drafts anyway (a probe).
PROBE_EVERY = 16
#: Steps of each sort seen before the figures are trusted (drafting meanwhile).
WARMUP = 8
ALPHA = 0.1            # weight of a new reading in the averages
#: Steps of one draft length read before their own cost is used instead of the line's.
SIZE_READINGS = 3
#: The acceptance a guess (a sort other than the copies, "" and "pool") is drafted for while
#: it is new: about half, as the fresh prompt set's replay found them taken.
GUESS_PRIOR = 0.5


def expected_tokens(a: float, k: int) -> float:
    """Tokens a step with ``k`` drafts yields on average (the accepted run plus the target's
    own token), for a per-token acceptance chance ``a``."""
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def best_k(a: float, plain_s: float, per_draft_s: float, n_max: int,
           measured: dict[int, float] | None = None) -> int:
    """The draft length (0: do not draft) with the most tokens per second; a step of k
    drafts costs ``measured[k]`` seconds where given, ``plain_s + k * per_draft_s`` else."""
    best, best_rate = 0, 0.0
    measured = measured or {}
    for k in range(1, n_max + 1):
        cost = measured.get(k) or plain_s + k * max(per_draft_s, 0.0)
        rate = expected_tokens(a, k) / cost
        if rate > best_rate:
            best, best_rate = k, rate
    return best if best_rate * plain_s >= MARGIN else 0


@dataclass
class SortFigures:
    """The running acceptance of one kind of request's drafts of one sort: ``accepted``
    tokens and ``rejections`` (steps that ended at a refused token), both decayed, so the
    acceptance follows the recent requests; ``since_probe`` counts the steps it sat out."""
    accepted: float = 0.0
    rejections: float = 0.0
    draft_steps: int = 0
    since_probe: int = 0

    @property
    def acceptance(self) -> float:
        total = self.accepted + self.rejections
        return self.accepted / total if total else 0.0

    def record(self, drafted: int, accepted: int) -> None:
        self.draft_steps += 1
        self.accepted = self.accepted * (1 - ALPHA) + accepted
        self.rejections = self.rejections * (1 - ALPHA) + (accepted < drafted)

    def probe(self) -> bool:
        """Whether a step judged not to pay drafts anyway (one in ``PROBE_EVERY``)."""
        self.since_probe += 1
        if self.since_probe >= PROBE_EVERY:
            self.since_probe = 0
            return True
        return False


@dataclass
class KindStats:
    """Running figures of one model's drafting for one kind of request: ``main`` the
    acceptance of the drafter's main guesses, ``sorts`` that of its other sorts. The step
    costs are read from every draft step, whatever its sort."""
    n_max: int
    plain_s: float = 0.0
    per_draft_s: float = 0.0
    plain_steps: int = 0
    main: SortFigures = field(default_factory=SortFigures)
    #: Drafted tokens k -> the running seconds of a step of k drafts, and how many were read.
    size_s: dict[int, float] = field(default_factory=dict)
    size_steps: dict[int, int] = field(default_factory=dict)
    #: Of ``size_s``, the costs read often enough to be trusted (``SIZE_READINGS``): kept as
    #: they are read, so a decode step's decision builds nothing.
    trusted: dict[int, float] = field(default_factory=dict)
    sorts: dict[str, SortFigures] = field(default_factory=dict)

    def measured(self) -> dict[int, float]:
        """The step costs read often enough to be trusted (``SIZE_READINGS``)."""
        return self.trusted

    @property
    def acceptance(self) -> float:
        return self.main.acceptance

    @property
    def draft_steps(self) -> int:
        """Steps that drafted a main guess."""
        return self.main.draft_steps

    def n_for_next(self) -> int:
        """How many tokens the next step may draft (0: a plain step)."""
        if self.plain_steps < WARMUP or self.main.draft_steps < WARMUP:
            return self.n_max
        k = best_k(self.main.acceptance, self.plain_s, self.per_draft_s, self.n_max,
                   self.trusted)
        if k:
            return k
        return self.n_max if self.main.probe() else 0

    def trimmed(self, n: int) -> int:
        """The length up to ``n`` with the most tokens per second were every drafted token
        taken: ``n`` unless a shorter draft's measured step is that much cheaper (a CPU's
        kernels take positions in groups: where 5 positions cost far more than 4, a draft
        of 4 becomes one of 3, which yields more even when all 4 would have been taken).
        Lengths not read often enough cost the line, which never cuts."""
        best, best_rate = n, 0.0
        for k in range(n, 0, -1):
            cost = self.trusted.get(k) or self.plain_s + k * max(self.per_draft_s, 0.0)
            if cost > 0 and (k + 1) / cost > best_rate:
                best, best_rate = k, (k + 1) / cost
        return best

    def n_for_sort(self, sort: str, n: int) -> int:
        """How much of a draft of ``n`` tokens of ``sort`` to keep (0: none): for the main
        sort (""), the main figures' length, trimmed; for another, ``warming``'s length
        while that sort is new (``WARMUP`` of its steps), all on a probe, else as far as its
        own acceptance pays."""
        if not sort:
            return self.trimmed(min(n, self.n_for_next()))
        figures = self.sorts.setdefault(sort, SortFigures())
        if figures.draft_steps < WARMUP or self.plain_steps < WARMUP:
            return self.warming(sort, n)
        k = best_k(figures.acceptance, self.plain_s, self.per_draft_s, n, self.trusted)
        if k:
            return k
        return n if figures.probe() else 0

    def warming(self, sort: str, n: int) -> int:
        """How much of a draft of ``n`` tokens a sort still new drafts: an earlier answer
        ("pool", a copy) all of it; a guess as far as ``GUESS_PRIOR`` pays on the costs read
        so far, and at least one token, so that its own acceptance gets read. Where a
        position costs half a step (a few CPU cores) that is one token, not the four that
        cost 3.6 plain steps for about two kept; where it is nearly free (a GPU), all.
        Before a plain step was timed, all of it."""
        if sort == "pool" or not self.plain_s:
            return n
        return max(1, best_k(GUESS_PRIOR, self.plain_s, self.per_draft_s, n, self.trusted))

    def record(self, drafted: int, accepted: int, step_s: float, sort: str = "") -> None:
        """One generating step: ``drafted`` tokens checked (0: a plain step) of ``sort``
        ("": the drafter's main guesses), ``accepted`` of them kept, ``step_s`` seconds of
        llama_decode."""
        if drafted == 0:
            self.plain_s = _ema(self.plain_s, step_s, self.plain_steps)
            self.plain_steps += 1
            return
        if self.plain_steps:
            extra = max(step_s - self.plain_s, 0.0) / drafted
            costed = self.main.draft_steps + sum(f.draft_steps for f in self.sorts.values())
            self.per_draft_s = _ema(self.per_draft_s, extra, costed)
        seen = self.size_steps.get(drafted, 0)
        # A plain mean of the first readings (one slow step must not decide a length for
        # good), then the same decay as the other figures.
        weight = max(1.0 / (seen + 1), ALPHA)
        self.size_s[drafted] = self.size_s.get(drafted, 0.0) * (1 - weight) + step_s * weight
        self.size_steps[drafted] = seen + 1
        if seen + 1 >= SIZE_READINGS:
            self.trusted[drafted] = self.size_s[drafted]
        figures = self.sorts.setdefault(sort, SortFigures()) if sort else self.main
        figures.record(drafted, accepted)


def _ema(old: float, new: float, n: int) -> float:
    return new if n == 0 else old + ALPHA * (new - old)


class AutoDrafter:
    """A drafter that drafts only as ``stats`` advise, and feeds them. A drafter that names
    the sort of each draft (``sort``) is asked for all it would draft, and the draft is cut
    to what that sort's figures pay for; any other is asked for no more than the main
    figures pay for."""

    def __init__(self, inner: Drafter, stats: KindStats):
        self.inner, self.stats = inner, stats
        self.method = inner.method
        self.sorted = hasattr(inner, "sort")
        self.sort = ""                      # the sort of the draft in flight

    def propose(self, context: list[int], n_max: int) -> list[int]:
        return self.plan(context, n_max)[0] if self.sorted else \
            self.inner.propose(context, min(n_max, self.stats.n_for_next()))

    def plan(self, context: list[int], n_max: int) -> Plan:
        """The inner drafter's plan within the policy's length (0 on a step it keeps plain:
        no tokens, or a batched ask for none)."""
        if not self.sorted:
            return self.inner.plan(context, min(n_max, self.stats.n_for_next()))
        tokens, batched = self.inner.plan(context, n_max)
        if not tokens:
            return tokens, batched
        self.sort = self.inner.sort            # type: ignore[attr-defined]
        return tokens[:self.stats.n_for_sort(self.sort, len(tokens))], batched

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None:
        self.stats.record(drafted, accepted, step_s, self.sort if drafted else "")
        self.sort = ""
        self.inner.on_accept(drafted, accepted, step_s)

    def close(self) -> None:
        self.inner.close()
