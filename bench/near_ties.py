"""How far the batch shape moves a greedy answer's logits: the measurement behind
``accept.NEAR_TIE``, the margin under the argmax within which a plain greedy verify keeps a
drafted token.

On the default chat model as the engine loads it (``LlamaChatEngine``, speculation off,
``--threads`` threads, one slot), each prompt of the fresh set's ``--kinds`` is answered
greedily one token per ``llama_decode`` (the shape of a plain step), up to ``--tokens``
tokens; then the same prompt and answer are evaluated again ``k`` answer tokens per decode
(the shape of a verify of k - 1 drafts), for each k of ``--chunks``. Per k it prints, over
every answer position: how far the reference's five likeliest logits moved (median, 99th
percentile, largest), how far the gap between its two likeliest moved, and at how many
positions the argmax changed. Then the share of positions whose two likeliest lie within
0.02 ... 0.3 of each other in the reference, and how many of them the margin covers.

    python bench/near_ties.py [--kinds again] [--tokens 200] [--chunks 2,4,8]
                              [--threads N] [--weights PATH]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_step_costs import decode_sequence, default_weights  # noqa: E402
from speculative_fresh_prompts import PROMPTS  # noqa: E402

from hypnos.engines.llama.speculative.accept import NEAR_TIE  # noqa: E402


def evaluate(loop, tokens: list[int], start: int, k: int,
             answer: int = 0) -> tuple[np.ndarray, list[int]]:
    """On the loop's decode thread: ``tokens[:start]`` as a prefill, then the rest ``k`` per
    decode with logits at each; or, with ``answer`` > 0, greedy generation from
    ``tokens[:start]`` one token per decode (``k`` ignored) until ``answer`` tokens or an
    end of generation. Returns (logits per evaluated position, the tokens)."""
    ll, ctx, mem = loop.ll, loop.ctx, loop.mem
    vocab = ll.llama_model_get_vocab(ll.llama_get_model(ctx))
    n_vocab = ll.llama_vocab_n_tokens(vocab)
    seq = loop.slots[0].seq_id
    tokens = list(tokens)

    def decode(pos0: int, part: list[int], want: bool) -> list[np.ndarray]:
        decode_sequence(ll, ctx, seq, part, pos0, want)
        if not want:
            return []
        return [np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, i),
                                      shape=(n_vocab,)).copy() for i in range(len(part))]

    def run():
        ll.llama_memory_seq_rm(mem, seq, 0, -1)
        for s in range(0, start, loop.n_batch):
            decode(s, tokens[s:min(start, s + loop.n_batch)], False)
        rows: list[np.ndarray] = []
        if answer:
            pos = start - 1
            ll.llama_memory_seq_rm(mem, seq, pos, -1)      # the prompt's last token again
            while len(tokens) - start < answer:
                (row,) = decode(pos, [tokens[pos]], True)
                rows.append(row)
                nxt = int(row.argmax())
                if ll.llama_vocab_is_eog(vocab, nxt):
                    break
                tokens.append(nxt)
                pos += 1
        else:
            ll.llama_memory_seq_rm(mem, seq, start - 1, -1)
            for s in range(start - 1, len(tokens), k):
                rows += decode(s, tokens[s:min(len(tokens), s + k)], True)
        ll.llama_memory_seq_rm(mem, seq, 0, -1)
        return np.array(rows), tokens

    return loop.call(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="again")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--chunks", default="2,4,8")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--weights", type=Path, default=None)
    args = ap.parse_args()
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import LoadSpec
    chunks = [int(x) for x in args.chunks.split(",")]
    kinds = set(args.kinds.split(","))
    prompts = [p for p in PROMPTS if p.kind in kinds]
    weights = args.weights or default_weights()
    threads = args.threads or len(os.sched_getaffinity(0))
    engine = LlamaChatEngine()
    engine.load(LoadSpec("near-ties", weights, context_len=4096, slots=1, threads=threads,
                         options={"speculative": "off"}))
    moved = {k: [] for k in chunks}
    gap_moved = {k: [] for k in chunks}
    flips = dict.fromkeys(chunks, 0)
    gaps = []
    try:
        for p in prompts:
            prompt = engine.render_prompt([{"role": "user", "content": p.ask}])
            ref, seq = evaluate(engine._loop, prompt, len(prompt), 1, answer=args.tokens)
            # The reference's rows are the logits after each of seq[len(prompt)-1:]; the
            # chunked runs evaluate exactly those positions.
            seq = seq[:len(prompt) - 1 + len(ref)]
            top = np.argsort(-ref, axis=1)[:, :5]
            first = np.take_along_axis(ref, top[:, :1], 1) - np.take_along_axis(ref, top[:, 1:2], 1)
            gaps.append(first.ravel())
            for k in chunks:
                got, _ = evaluate(engine._loop, seq, len(prompt), k)
                got = got[:len(ref)]
                moved[k].append(np.abs(np.take_along_axis(got, top, 1)
                                       - np.take_along_axis(ref, top, 1)).max(1))
                second = np.take_along_axis(got, top[:, :1], 1) \
                    - np.take_along_axis(got, top[:, 1:2], 1)
                gap_moved[k].append(np.abs(first - second).ravel())
                flips[k] += int((ref.argmax(1) != got.argmax(1)).sum())
            print(f"  {p.name}: {len(ref)} positions", flush=True)
    finally:
        engine.unload()
    n = sum(len(g) for g in gaps)
    print(f"{weights.name}, {threads} threads, {len(prompts)} prompts ({args.kinds}), "
          f"{n} answer positions; reference: one token per decode")
    for k in chunks:
        m, g = np.concatenate(moved[k]), np.concatenate(gap_moved[k])
        print(f"  {k} per decode: top-5 logit moved median {np.median(m):.3f} p99 "
              f"{np.percentile(m, 99):.3f} max {m.max():.3f}; top-2 gap moved median "
              f"{np.median(g):.3f} p99 {np.percentile(g, 99):.3f} max {g.max():.3f}; argmax "
              f"changed at {flips[k]} ({flips[k] / n:.1%})")
    g = np.concatenate(gaps)
    shares = ", ".join(f"< {t}: {(g < t).mean():.1%}" for t in (0.02, 0.05, 0.1, 0.2, 0.3))
    print(f"  reference top-2 gap {shares}; NEAR_TIE = {NEAR_TIE}")


if __name__ == "__main__":
    main()
