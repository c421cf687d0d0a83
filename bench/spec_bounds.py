"""How much any prompt lookup could gain on a machine: upper bounds per prompt, beside what
the default drafter gets, from the recorded answers and a step-cost table.

Every figure is the answer's tokens over the plain steps it costs, as ``spec_replay``
prices a request (``spec_replay.StepCosts``: a batch of b positions costs ``of(b)`` plain
steps), so a ratio to plain decoding on that machine:

  drafter  the drafter ``auto`` builds, replayed (``spec_replay.replay_set``, the same
           sessions and runs; median over runs)
  stopped  the same drafter with a perfect stop rule: each draft cut where the answer
           leaves it, so none is ever refused (``replay(perfect_stop=True)``)

and two bounds that also let a step draft only tokens that are right, each the cheapest
schedule for the answer (dynamic programming, ``cheapest``):

  latest   what prompt lookup can copy where it knows how far its copy holds: at each
           position, the tokens after the latest earlier place of the longest suffix of the
           context (at most ``SUFFIX_MAX`` tokens, at least one) that occurred before
           (``latest_runs``). A lookup drafter with a perfect stop rule reaches this.
  copied   what any lookup can copy: at each position, the longest run of the answer from
           there that stands anywhere earlier in the prompt or the answer so far
           (``copied_runs``). A drafter also told which earlier place to copy reaches this.

The bounds leave out the answers of earlier prompts in the session, which only a question
asked again draws on, and a draft that copies its own drafted tokens. Read across a row:
what ``stopped`` gains over ``drafter`` is lost to refused drafts; what ``latest`` gains
over ``stopped`` is lost to places the drafter does not draft from (its match floor);
what ``copied`` gains over ``latest`` needs a way to tell the right earlier place from the
latest one. A target ``copied`` does not reach cannot be met by prompt lookup on that
machine.

    python bench/spec_bounds.py [--costs COSTS.json] [--runs 3] [--only structured,edit]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hypnos.bench.spec_replay import ANSWERS, load_costs, replay_set
from hypnos.bench.speculative_fresh import select
from hypnos.bench.speculative_fresh_prompts import FAMILIES, PROMPTS
from hypnos.bench.speculative_fresh_report import TARGETS, fmt, geomean
from hypnos.engines.llama.speculative.choose import NGRAM_N_MAX

#: The longest context suffix ``latest_runs`` matches.
SUFFIX_MAX = 16
#: The columns, in order.
FIGURES = ("drafter", "stopped", "latest", "copied")
#: The most tokens one step drafts (``auto``'s prompt lookup: ``choose.NGRAM_N_MAX``).
DRAFT_MAX = NGRAM_N_MAX


def cheapest(runs: Sequence[int], cost: Callable[[int], float]) -> float:
    """The fewest plain steps that decode an answer of ``len(runs)`` tokens where, at
    position i, a step may draft up to ``runs[i]`` tokens, all of them right (a step of b
    positions costs ``cost(b)`` and moves b tokens on; the last token is never drafted, as
    a step's own token ends the answer)."""
    n = len(runs)
    best = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        longest = min(runs[i], n - i - 1, DRAFT_MAX)
        best[i] = min(cost(d + 1) + best[i + d + 1] for d in range(longest + 1))
    return best[0]


def _agreement(source: Sequence[int], start: int, answer: Sequence[int], i: int) -> int:
    """How many tokens of ``source`` from ``start`` agree with ``answer`` from ``i``."""
    n = 0
    while (n < DRAFT_MAX and start + n < len(source) and i + n < len(answer)
           and source[start + n] == answer[i + n]):
        n += 1
    return n


def copied_runs(prompt: Sequence[int], answer: Sequence[int]) -> list[int]:
    """Per answer position i, the longest run ``answer[i:i + L]`` (at most ``DRAFT_MAX``)
    that stands somewhere in ``prompt + answer[:i]``, wholly."""
    hay = list(prompt)
    places: dict[int, list[int]] = {}
    for s, t in enumerate(hay):
        places.setdefault(t, []).append(s)
    runs = []
    for i, token in enumerate(answer):
        runs.append(max((_agreement(hay, s, answer, i) for s in places.get(token, ())),
                        default=0))
        places.setdefault(token, []).append(len(hay))
        hay.append(token)
    return runs


def latest_runs(prompt: Sequence[int], answer: Sequence[int]) -> list[int]:
    """Per answer position i, how far the continuation of the latest earlier place of the
    context's longest repeated suffix (``SUFFIX_MAX`` at most) agrees with ``answer[i:]``;
    0 where the context's last token never occurred before."""
    hay = list(prompt)
    after: dict[int, list[int]] = {}        # token -> places right after its occurrences
    for s in range(1, len(hay)):
        after.setdefault(hay[s - 1], []).append(s)
    runs = []
    for i, token in enumerate(answer):
        places = after.get(hay[-1], []) if hay else []
        best_len, best_at = 0, -1
        for e in reversed(places):           # latest first: it wins a tie
            m = 1
            while m < SUFFIX_MAX and e - 1 - m >= 0 and hay[e - 1 - m] == hay[-1 - m]:
                m += 1
            if m > best_len:
                best_len, best_at = m, e
        runs.append(_agreement(hay, best_at, answer, i) if best_at >= 0 else 0)
        if hay:
            after.setdefault(hay[-1], []).append(len(hay))
        hay.append(token)
    return runs


@dataclass(frozen=True)
class Bounds:
    """One prompt's figures, each a ratio to plain decoding (the module's list)."""
    name: str
    kind: str
    half: str
    tokens: int
    drafter: float
    stopped: float
    latest: float
    copied: float


def bounds_of(record: dict, names: list[str], cost: Callable[[int], float],
              drafter: dict[str, float], stopped: dict[str, float]) -> list[Bounds]:
    """The rows of ``names`` (``drafter`` and ``stopped``: the replayed figures by name)."""
    out = []
    for name in names:
        got = record["answers"][name]
        prompt, answer = got["prompt"], got["answer"]
        n = len(answer)
        out.append(Bounds(name, got["kind"], got["half"], n, drafter[name], stopped[name],
                          n / cheapest(latest_runs(prompt, answer), cost),
                          n / cheapest(copied_runs(prompt, answer), cost)))
    return out


def print_bounds(rows: list[Bounds]) -> None:
    print(f"\n{'kind':11} {'half':4} {'prompt':28} {'tokens':>6} {'drafter':>7} "
          f"{'stopped':>7} {'latest':>6} {'copied':>6}")
    for r in rows:
        print(f"{r.kind:11} {r.half:4} {r.name.partition('/')[2]:28} {r.tokens:6d} "
              f"{r.drafter:7.2f} {r.stopped:7.2f} {r.latest:6.2f} {r.copied:6.2f}")
    print("\nper kind: geometric mean (least); the family's target on every prompt")
    print(f"{'kind':11} {'n':>2} " + " ".join(f"{f:>13}" for f in FIGURES) + "  target")
    for family, kinds in FAMILIES.items():
        for kind in kinds:
            chosen = [r for r in rows if r.kind == kind]
            if not chosen:
                continue
            cells = []
            for field in FIGURES:
                values = [getattr(r, field) for r in chosen]
                cells.append(f"{fmt(geomean(values), 6, 2)} ({min(values):4.2f})")
            print(f"{kind:11} {len(chosen):2d} " + " ".join(f"{c:>13}" for c in cells)
                  + f"  {TARGETS[family]}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", default=str(ANSWERS))
    ap.add_argument("--costs", default=None,
                    help="a step-cost record (spec_step_costs.py --json); default: measure")
    ap.add_argument("--runs", type=int, default=3, help="the drafter's replayed sessions")
    ap.add_argument("--only", default=None, help="prompt names, kinds, families or halves")
    args = ap.parse_args()
    try:
        prompts = select(PROMPTS, args.only.split(",") if args.only else None)
    except ValueError as e:
        sys.exit(str(e))
    with open(args.answers) as f:
        record = json.load(f)
    try:
        costs, where = load_costs(args.costs)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"--costs {args.costs}: not a step-cost record ({e})")
    print(f"costs: {where}; plain steps per batch: "
          + ", ".join(f"{b}: {c:.2f}" for b, c in sorted(costs.steps.items())))
    drafter, stopped = ({r.prompt.name: r.ratio("default") or 1.0
                         for r in replay_set(record, prompts, costs, args.runs, perfect)}
                        for perfect in (False, True))
    print_bounds(bounds_of(record, [p.name for p in prompts], costs.of, drafter, stopped))


if __name__ == "__main__":
    main()
