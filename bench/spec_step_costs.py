"""What a drafted token costs this machine: the price speculative decoding pays, and so the
most it can gain, on the default chat model as the engine loads it.

Speculation verifies k drafted tokens in one ``llama_decode`` of k + 1 positions. Where a
step of one token is bound by memory (a GPU, a many-core CPU), the extra positions are
nearly free and a copied answer is decoded several times faster; where it is bound by
arithmetic (a few CPU cores), each extra position costs a good share of a step, and that
share caps the gain whatever the drafter does. This bench measures it on the engine's own
context (``LlamaChatEngine``, the lineup's weights, ``--threads`` threads, speculation off):
one batch of b positions at ``--at`` tokens of context, for each b, rounds interleaved and
medians taken, the KV rolled back after every batch. It prints per b the milliseconds, the
plain steps it equals, what each drafted position adds (in plain steps), the ceiling (k + 1
tokens for the price of a b = k + 1 batch: every draft accepted) and the break-even
acceptance (the per-token acceptance a draft of k needs to pay at all, answers stopping at
the first refused token).

    python bench/spec_step_costs.py [--threads N] [--sizes 1,2,3,...,64 (SIZES)]
                                    [--rounds 9] [--at 512] [--weights PATH] [--json PATH]

``--json`` writes the costs as ``spec_replay.py --costs`` reads them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

from hypnos.engines.llama.speculative.tuning import expected_tokens

ROOT = Path(__file__).resolve().parent.parent
#: The batch sizes timed by default: every draft length ``auto`` picks among up to 16
#: (a CPU's kernels take positions in groups, so the cost is not a line), then sparser.
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17, 24, 32, 48, 64]


def default_weights() -> Path:
    """The default lineup's chat model, under ``./models`` (``hypnos models pull``)."""
    from hypnos.catalog.blocks import block_fields
    from hypnos.catalog.catalog import load_catalog
    entry = next(e for e in load_catalog().lineup() if e.modality == "text_generation")
    models = Path(os.environ.get("HYPNOS_MODELS_DIR", ROOT / "models"))
    return models / block_fields(entry, entry.default_variant())["weights_path"]


def break_even(k: int, cost: float) -> float:
    """The least acceptance at which k drafts for ``cost`` plain steps pay (bisection)."""
    lo, hi = 0.0, 1.0
    if expected_tokens(1.0, k) < cost:
        return float("nan")
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < cost else (lo, mid)
    return hi


def decode_sequence(ll, ctx, seq: int, tokens: list[int], pos0: int,
                    logits_all: bool) -> float:
    """One ``llama_decode`` of ``tokens`` at positions ``pos0``.. of sequence ``seq``, with
    logits at every position (``logits_all``) or at the last; its seconds."""
    batch = ll.llama_batch_init(len(tokens), 0, 1)
    try:
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i] = t, pos0 + i
            batch.n_seq_id[i], batch.seq_id[i][0] = 1, seq
            batch.logits[i] = int(logits_all or i == len(tokens) - 1)
        t0 = time.perf_counter()
        if ll.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return time.perf_counter() - t0
    finally:
        ll.llama_batch_free(batch)


def measure(engine, sizes: list[int], rounds: int, at: int) -> dict[int, float]:
    """Median seconds of one ``llama_decode`` of b positions (logits at each), per b, run on
    the engine's decode thread with slot 0's sequence ``at`` tokens long."""
    loop = engine._loop
    ll, ctx, mem = loop.ll, loop.ctx, loop.mem
    seq = loop.slots[0].seq_id
    n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(ll.llama_get_model(ctx)))
    span = min(20000, n_vocab - 100)                  # a small test model's vocabulary too
    filler = [(i * 7919) % span + 100 for i in range(at + max(sizes))]

    def decode(tokens: list[int], pos0: int, logits_all: bool) -> float:
        return decode_sequence(ll, ctx, seq, tokens, pos0, logits_all)

    def run() -> dict[int, list[float]]:
        ll.llama_memory_seq_rm(mem, seq, 0, -1)
        for start in range(0, at, 256):
            decode(filler[start:min(at, start + 256)], start, False)
        times: dict[int, list[float]] = {b: [] for b in sizes}
        rng = random.Random(0)
        for _ in range(rounds + 1):               # the first round warms each shape up
            order = list(sizes)
            rng.shuffle(order)
            for b in order:
                times[b].append(decode(filler[at:at + b], at, True))
                ll.llama_memory_seq_rm(mem, seq, at, -1)
        ll.llama_memory_seq_rm(mem, seq, 0, -1)
        return times

    times = loop.call(run)
    return {b: statistics.median(t[1:]) for b, t in times.items()}


def measure_costs(weights: Path, threads: int | None, sizes: list[int], rounds: int = 9,
                  at: int = 512, gpu_layers: int = -1) -> dict[int, float]:
    """``measure`` on ``weights`` loaded as the engine loads a chat model (speculation off,
    ``gpu_layers`` on the GPU where the build has one)."""
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import LoadSpec
    engine = LlamaChatEngine()
    engine.load(LoadSpec("bench", weights, context_len=4096, slots=1, threads=threads,
                         gpu_layers=gpu_layers, options={"speculative": "off"}))
    try:
        return measure(engine, sorted(set(sizes) | {1}), rounds, at)
    finally:
        engine.unload()


def costs_record(med: dict[int, float], weights: Path, threads: int | None,
                 where: str | None = None) -> dict:
    """The costs as a record (``spec_replay.StepCosts.from_record``): a plain step's
    milliseconds, each batch size's plain steps, and where they were measured."""
    plain = med[1]
    where = where or (f"{weights.name}, {threads} threads, "
                      f"{platform.processor() or platform.machine()}")
    return {"where": where, "plain_ms": plain * 1000,
            "steps": {str(b): med[b] / plain for b in sorted(med)}}


def print_costs(med: dict[int, float]) -> None:
    plain = med[1]
    print(f"{'batch':>5} {'ms':>8} {'plain steps':>11} {'per draft':>9} {'ceiling':>7} "
          f"{'break-even a':>12}")
    for b in sorted(med):
        steps, k = med[b] / plain, b - 1
        per = (steps - 1) / k if k else 0.0
        ceiling = b / steps
        even = break_even(k, steps) if k else float("nan")
        print(f"{b:5} {med[b] * 1000:8.1f} {steps:11.2f} {per:9.2f} {ceiling:6.2f}x "
              f"{even:12.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--at", type=int, default=512, help="context tokens before the batch")
    ap.add_argument("--weights", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="write the costs here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    weights = args.weights or default_weights()

    import llama_cpp
    med = measure_costs(weights, args.threads, sizes, args.rounds, args.at)
    print(f"{weights.name}, {args.threads} threads, {platform.processor() or platform.machine()}"
          f", context {args.at} tokens, medians of {args.rounds} interleaved rounds")
    print(llama_cpp.llama_print_system_info().decode().strip())
    print_costs(med)
    if args.json is not None:
        args.json.write_text(json.dumps(costs_record(med, weights, args.threads), indent=1)
                             + "\n")


if __name__ == "__main__":
    main()
