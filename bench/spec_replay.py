"""What the default speculation would gain on a machine, from its two causes apart: how often
prompt lookup guesses the answer (recorded answers: the model's and the prompts', not the
machine's) and what a drafted position costs there (step costs measured on that machine).

The default chat model's greedy answers to the fresh prompt set (``speculative_fresh_prompts``)
are replayed through the drafter a server builds on its defaults (``Speculation.for_job`` of
``speculative = "auto"``), step by step as the decode loop drafts and verifies: each step
drafts what the loop would ask for, keeps the drafted tokens the answer agrees with and one
more, tells the drafter (``on_accept``), and costs what a batch of its size costs in plain
steps by the table. ``off`` costs one step a token. A run is one session in
``speculative_fresh.session_order``'s order under one partition (answers and ``auto``'s
figures carry from prompt to prompt, as under one key); an ``again`` prompt is replayed
twice, the first unmeasured. Per prompt the median over runs; then
``speculative_fresh_report``'s table of default / off with issue 39's verdicts.

Why: ``speculative.py --fresh`` measures real servers on the default model, which a lent GPU
machine (no network, 64 MiB per call) cannot get. There the GPU check (``gpu_check.py``,
check 8) measures the step costs on a GGUF of the default model's shape and replays the
answers recorded here (``spec_replay_answers.json``). What it leaves out: the drafter's own
time, prefill and the server's overhead (the figures are decode rates), and that another
machine's greedy answers may differ a little from these.

    python bench/spec_replay.py --record [--answers PATH] [--threads N]   # a few minutes
    python bench/spec_replay.py [--costs COSTS.json] [--runs 3] [--answers PATH] [--only K]

Without ``--costs``, the costs are measured here first (``spec_step_costs.py``; ``--json``
there writes such a file).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from hypnos.bench.spec_step_costs import SIZES, costs_record, default_weights, measure_costs
from hypnos.bench.speculative_fresh import select, session_order
from hypnos.bench.speculative_fresh_prompts import PROMPTS, FreshPrompt
from hypnos.bench.speculative_fresh_report import (Ask, GroupFigure, PromptResult,
                                                   print_summary, summarize)
from hypnos.engines.llama.speculative.choose import Speculation, parse_spec
from hypnos.engines.records import ChatRequest

ANSWERS = Path(__file__).resolve().parent / "spec_replay_answers.json"
TOKENS = 400                    # speculative_fresh's answers are at most this long


# ------------------------------------------------------------------ costs

@dataclass(frozen=True)
class StepCosts:
    """What a batch of b positions costs in plain steps (``steps``: b -> cost, measured at
    some sizes, straight lines between them, flat past the largest), and a plain step's
    seconds (the unit ``auto``'s figures are kept in)."""
    steps: dict[int, float]
    plain_s: float

    def of(self, b: int) -> float:
        sizes = sorted(self.steps)
        if b <= sizes[0]:
            return self.steps[sizes[0]]
        for lo, hi in zip(sizes, sizes[1:], strict=False):
            if b <= hi:
                return self.steps[lo] + (self.steps[hi] - self.steps[lo]) * (b - lo) / (hi - lo)
        return self.steps[sizes[-1]]

    @classmethod
    def from_record(cls, record: dict) -> StepCosts:
        """From ``spec_step_costs.costs_record``'s dict (``plain_ms``, ``steps``)."""
        return cls({int(b): float(c) for b, c in record["steps"].items()},
                   record["plain_ms"] / 1000)


def load_costs(path: Path | str | None, weights: Path | None = None,
               threads: int | None = None) -> tuple[StepCosts, str]:
    """The step costs of a record at ``path`` (``spec_step_costs.py --json``), else measured
    here on ``weights`` (the lineup's chat model) with ``threads``; and where they were
    measured."""
    if path is not None:
        record = json.loads(Path(path).read_text())
    else:
        weights = weights or default_weights()
        threads = threads or len(os.sched_getaffinity(0))
        record = costs_record(measure_costs(weights, threads, SIZES), weights, threads)
    return StepCosts.from_record(record), record.get("where", "?")


# ------------------------------------------------------------------ the replay

@dataclass
class Replayed:
    """One answer replayed: its tokens, the plain steps they cost with drafting, and the
    drafted and accepted tokens."""
    tokens: int
    steps: float
    drafted: int = 0
    accepted: int = 0

    def ask(self, plain_s: float, drafting: bool) -> Ask:
        """As ``speculative_fresh_report`` reads a request: its wall time is its decode."""
        wall = self.steps * plain_s
        return Ask(self.tokens, wall, self.tokens / wall, "ngram" if drafting else "",
                   self.drafted, self.accepted)


def replay(spec: Speculation, partition: str, prompt: list[int], answer: list[int],
           costs: StepCosts, max_tokens: int = TOKENS,
           perfect_stop: bool = False) -> Replayed:
    """``answer`` decoded after ``prompt`` with ``spec``'s drafter for ``partition``, as the
    decode loop (``verify.Verifier``) drives it: a draft of at most the figures' cap and
    ``max_tokens - generated - 1``, kept up to the first token the answer disagrees with,
    plus that one; every step priced by ``costs``. ``perfect_stop``: every draft is cut
    where the answer leaves it before it is priced (a bound: the drafter's own guesses with
    none ever refused, ``spec_bounds.py``)."""
    drafter, _, stats = spec.for_job(None, len(prompt), "text", partition)
    if drafter is None or stats is None:
        return Replayed(len(answer), float(len(answer)))
    done = Replayed(len(answer), 0.0)
    context = list(prompt)
    i = 0
    try:
        while i < len(answer):
            k = max(0, min(stats.cap, max_tokens - i - 1))
            draft = drafter.plan(context, k)[0][:k] if k else []
            matched = 0
            while (matched < len(draft) and i + matched < len(answer)
                   and draft[matched] == answer[i + matched]):
                matched += 1
            if perfect_stop:
                draft = draft[:matched]
            cost = costs.of(len(draft) + 1)
            done.steps += cost
            done.drafted += len(draft)
            done.accepted += matched
            drafter.on_accept(len(draft), matched, cost * costs.plain_s)
            taken = answer[i:i + matched + 1]
            context.extend(taken)
            i += len(taken)
    finally:
        drafter.close()
    return done


def replay_set(record: dict, prompts: list[FreshPrompt], costs: StepCosts,
               runs: int, perfect_stop: bool = False) -> list[PromptResult]:
    """Every prompt of ``prompts`` replayed once a run (``default``) and priced plainly
    (``off``), a session a run (``perfect_stop``: as ``replay`` says)."""
    answers, names = record["answers"], {int(t): n for t, n in record["names"].items()}
    controls = frozenset(record.get("controls", ()))
    results = {p.name: PromptResult(p) for p in prompts}
    for run in range(runs):
        spec = Speculation(parse_spec("auto"), can_rollback=True, spelling=names.__getitem__,
                           controls=controls)
        for p in session_order(prompts, run):
            got = answers[p.name]
            if p.kind == "again":                  # the first ask: not measured
                replay(spec, "run", got["prompt"], got["answer"], costs,
                       perfect_stop=perfect_stop)
            done = replay(spec, "run", got["prompt"], got["answer"], costs,
                          perfect_stop=perfect_stop)
            off = Replayed(len(got["answer"]), float(len(got["answer"])))
            results[p.name].asks.setdefault("default", []).append(done.ask(costs.plain_s, True))
            results[p.name].asks.setdefault("off", []).append(off.ask(costs.plain_s, False))
    return [results[p.name] for p in prompts]


def default_figures(results: list[PromptResult]) -> list[GroupFigure]:
    """``summarize``'s default / off rows (the replay has no separate ``auto``)."""
    return [f for f in summarize(results) if f.pair == "default/off"]


def print_prompts(results: list[PromptResult], plain_s: float) -> None:
    print(f"\n{'kind':11} {'half':4} {'prompt':30} {'tokens':>6} {'steps':>7} "
          f"{'default/off':>11}  accepted/drafted")
    for r in results:
        p, asks = r.prompt, r.asks["default"]
        tokens = asks[0].tokens
        steps = statistics.median(a.wall_s for a in asks) / plain_s
        print(f"{p.kind:11} {p.half:4} {p.name.partition('/')[2]:30} {tokens:6d} "
              f"{steps:7.1f} {r.ratio('default') or 0:11.2f}  "
              f"{sum(a.accepted for a in asks)}/{sum(a.drafted for a in asks)}")


# ------------------------------------------------------------------ recording

def record_answers(weights: Path, threads: int, out: Path, prompts: list[FreshPrompt]) -> None:
    """The model's greedy answers (speculation off, the server's loop bound) to ``prompts``,
    as token ids after the prompt's (the server's chat template), the spelling names of
    every token in them (``vocabulary.llama_spelling``) and the control tokens among them
    (``vocabulary.control_tokens``), so that the replay needs no model."""
    import threading

    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.llama.speculative.vocabulary import control_tokens, llama_spelling
    from hypnos.engines.records import LoadSpec
    from hypnos.service.config.schema import LimitsConfig
    loop_bound = LimitsConfig().repetition_loop_tokens     # as the server asks (chat.py)
    engine = LlamaChatEngine()
    engine.load(LoadSpec("record", weights, context_len=4096, slots=1, threads=threads,
                         options={"speculative": "off"}))
    answers: dict[str, dict] = {}
    try:
        loop = engine._loop
        spelling = llama_spelling(loop.ll, loop.vocab)
        eos = loop.ll.llama_vocab_eos(loop.vocab)
        for p in prompts:
            messages = [{"role": "user", "content": p.ask}]
            result = engine.chat(ChatRequest(messages=messages, max_tokens=TOKENS,
                                             temperature=0.0, repetition_bound=loop_bound),
                                 None, threading.Event())
            answer = engine._tokenize(result.text, False)
            if result.finish_reason == "stop":
                answer.append(eos)
            answers[p.name] = {"kind": p.kind, "half": p.half,
                               "prompt": engine.render_prompt(messages), "answer": answer}
            print(f"  {p.name:34} {len(answer):4d} tokens", flush=True)
        seen = {t for a in answers.values() for t in a["prompt"] + a["answer"]}
        names = {str(t): spelling(t) for t in sorted(seen)}
        controls = sorted(seen & control_tokens(loop.ll, loop.vocab))
    finally:
        engine.unload()
    out.write_text(json.dumps({"model": weights.name, "threads": threads, "tokens": TOKENS,
                               "answers": answers, "names": names, "controls": controls},
                              separators=(",", ":"))
                   + "\n")
    print(f"wrote {out} ({len(answers)} answers, {out.stat().st_size // 1024} KiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true",
                    help="record the default model's answers (needs the model)")
    ap.add_argument("--answers", type=Path, default=ANSWERS)
    ap.add_argument("--costs", type=Path, default=None,
                    help="a step-cost record (spec_step_costs.py --json); default: measure")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=None, help="prompt names, kinds, families or halves")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--weights", type=Path, default=None)
    args = ap.parse_args()
    prompts = select(PROMPTS, args.only.split(",") if args.only else None)
    weights = args.weights or default_weights()
    if args.record:
        record_answers(weights, args.threads, args.answers, prompts)
        return
    if not args.answers.is_file():
        sys.exit(f"no recorded answers at {args.answers}: run with --record first")
    record = json.loads(args.answers.read_text())
    costs, where = load_costs(args.costs, weights, args.threads)
    print(f"answers: {args.answers.name} ({record['model']}, {len(record['answers'])} "
          f"prompts); costs: {where}; {args.runs} runs")
    print("plain steps per batch: " + ", ".join(f"{b}: {c:.2f}" for b, c in
                                                sorted(costs.steps.items())))
    results = replay_set(record, prompts, costs, args.runs)
    print_prompts(results, costs.plain_s)
    print_summary(default_figures(results))


if __name__ == "__main__":
    main()
