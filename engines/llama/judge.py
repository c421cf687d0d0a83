"""Relevance by a chat model's judgement (the method Qwen3-Reranker is trained for): each
document is put to the model under its own chat template, "does this Document meet the
Query? answer yes or no", and the score is p(yes) / (p(yes) + p(no)) for the next token,
read from the raw logits (no sampler), so any chat model reranks with no extra download.

The prompts of one request share their start (system line, instruction, query); that prefix
is evaluated once, in sequence 0 of a scratch context, and copied (cells shared, not
recomputed) into the sequences the documents are evaluated in, up to ``PARALLEL`` at a time.

The scratch context is built for the call on the engine's model and freed after it: it never
touches the engine's slots, their KV or the prompt cache, so a large rerank cannot push a
conversation out of them. It holds at most one slot's context (``cap`` tokens), which bounds
what a rerank costs in memory; documents that do not fit beside each other are taken in
turns. It runs in the caller's thread, beside the decode thread (llama.cpp contexts on one
model are independent).
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable

from hypnos.engines.errors import EngineError
from hypnos.engines.llama.rerank import pack

#: The judging question. Qwen3-Reranker's own system line ("Judge whether the Document meets
#: the requirements based on the Query and the Instruct provided...") separated fewer of a
#: small fixed set of query/document pairs on qwen2.5-coder:0.5b than this plainer one did.
JUDGE_SYSTEM = "Answer only yes or no: does the Document answer the Query?"
DEFAULT_INSTRUCTION = ("Given a web search query, retrieve relevant passages that answer the "
                       "query")
#: Documents evaluated beside each other (each in its own sequence, after the prefix).
PARALLEL = 8


def judge_messages(query: str, document: str, instruction: str | None = None) -> list[dict]:
    """The chat the model judges one document in."""
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"<Instruct>: {instruction or DEFAULT_INSTRUCTION}\n"
                                        f"<Query>: {query}\n<Document>: {document}"}]


def answer_tokens(tokenize: Callable[[str], list[int]]) -> tuple[int, int]:
    """The first token of "yes" and of "no"."""
    yes, no = tokenize("yes"), tokenize("no")
    if not yes or not no or yes[0] == no[0]:
        raise EngineError("this vocabulary cannot tell \"yes\" from \"no\"")
    return yes[0], no[0]


def shared_prefix(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own."""
    first = prompts[0]
    n = min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


def yes_share(logit_yes: float, logit_no: float) -> float:
    """p(yes) / (p(yes) + p(no)) from the two logits (the softmax's sum cancels)."""
    d = logit_no - logit_yes
    if d > 0:
        e = math.exp(-d)
        return e / (1.0 + e)
    return 1.0 / (1.0 + math.exp(d))


def judge(ll, model, prompts: list[list[int]], answers: tuple[int, int], *, cap: int,
          n_batch: int, threads: int, cancel: threading.Event) -> tuple[list[float], int]:
    """Each prompt's yes-share, in order, and the tokens evaluated (the prefix once). Every
    prompt fits ``cap`` tokens (the caller checked). Blocks; a set ``cancel`` raises
    EngineError between batches."""
    prefix = shared_prefix(prompts)
    suffixes = [p[prefix:] for p in prompts]
    groups = pack([len(s) for s in suffixes], cap - prefix, PARALLEL)
    widest = max(sum(len(suffixes[i]) for i in g) for g in groups)
    ctx = _context(ll, model, prefix + widest, max(len(g) for g in groups) + 1, n_batch,
                   threads)
    scores = [0.0] * len(prompts)
    try:
        mem = ll.llama_get_memory(ctx)
        _decode(ll, ctx, [(t, pos, 0, False) for pos, t in enumerate(prompts[0][:prefix])],
                n_batch)
        for group in groups:
            if cancel.is_set():
                raise EngineError("cancelled")
            rows = []
            for k, i in enumerate(group, start=1):
                ll.llama_memory_seq_cp(mem, 0, k, -1, -1)
                last = len(suffixes[i]) - 1
                rows += [(t, prefix + j, k, j == last) for j, t in enumerate(suffixes[i])]
            logits = _decode(ll, ctx, rows, n_batch, answers)
            for i, (l_yes, l_no) in zip(group, logits, strict=True):
                scores[i] = yes_share(l_yes, l_no)
            for k in range(1, len(group) + 1):
                ll.llama_memory_seq_rm(mem, k, -1, -1)
    finally:
        ll.llama_free(ctx)
    return scores, prefix + sum(len(s) for s in suffixes)


def _context(ll, model, n_ctx: int, n_seqs: int, n_batch: int, threads: int):
    params = ll.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_seq_max = n_seqs
    params.n_batch = params.n_ubatch = n_batch
    params.n_threads = params.n_threads_batch = threads
    params.kv_unified = True           # a copied prefix shares its cells
    params.swa_full = True
    params.no_perf = True
    ctx = ll.llama_init_from_model(model, params)
    if not ctx:
        raise EngineError(f"llama.cpp could not build a scratch context of {n_ctx} tokens "
                          "to rerank in")
    return ctx


def _decode(ll, ctx, rows: list[tuple[int, int, int, bool]], n_batch: int,
            answers: tuple[int, int] | None = None) -> list[tuple[float, float]]:
    """Evaluate ``rows`` (token, position, sequence, wants logits) in batches of
    ``n_batch``; for each row that wants logits, the logits of the two ``answers``."""
    out: list[tuple[float, float]] = []
    batch = ll.llama_batch_init(n_batch, 0, 1)
    try:
        for start in range(0, len(rows), n_batch):
            chunk = rows[start:start + n_batch]
            for n, (tok, pos, seq, want) in enumerate(chunk):
                batch.token[n], batch.pos[n] = tok, pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq
                batch.logits[n] = want
            batch.n_tokens = len(chunk)
            rc = ll.llama_decode(ctx, batch)
            if rc != 0:
                raise EngineError(f"llama_decode failed ({rc}) while reranking")
            if answers is not None:
                for n, row in enumerate(chunk):
                    if row[3]:
                        logits = ll.llama_get_logits_ith(ctx, n)
                        out.append((float(logits[answers[0]]), float(logits[answers[1]])))
    finally:
        ll.llama_batch_free(batch)
    return out
