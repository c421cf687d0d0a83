"""Rerank throughput: documents per second through POST /v1/rerank, for rank pooling on a
reranker GGUF and for a chat model's yes/no judgement, against llama.cpp's own
``llama-server --rerank`` on the same reranker file, printed as ratios.

    python bench/rerank.py [--reranker FILE] [--docs 64] [--chat-docs 16] [--runs 3]
                           [--threads N]

Without ``--reranker`` the tiny generated one (``tests/tiny_reranker.py``, random weights:
throughput only, its scores mean nothing) is written to a temporary folder. The chat model is
qwen2.5-coder:0.5b from the models folder. llama-server is the binary bench/llama_server.py
builds and caches (``python bench/llama_server.py --build-only``); when it is absent the
baseline is reported missing and the Hypnos figures still print. Both servers run at once
with the same threads and take turns run by run; figures are medians. ``--threads N`` pins
the whole run to N CPUs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402
from llama_server import CACHE, LLAMA_CPP_PYTHON, LlamaServer  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from tiny_reranker import write_tiny_reranker  # noqa: E402

CHAT = "qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QUERY = "where do pandas live"
WORDS = ("panda bamboo forest mountain china bear river city train music bread garden "
         "winter summer rocket ocean island market school engine").split()
PAIR_CONTEXT = 256          # the tiny reranker's trained context; each side gets it per pair
PARALLEL = 8


def documents(n: int, words: int = 12) -> list[str]:
    """``n`` distinct lowercase documents of ``words`` words (the tiny vocabulary's letters)."""
    return [" ".join(WORDS[(i * 7 + j * (i % 5 + 1)) % len(WORDS)] for j in range(words))
            for i in range(n)]


def config(models: Path, reranker: str) -> str:
    return f"""
models_dir = "{models}"
[[models]]
id = "reranker"
modality = "rerank"
engine = "ggml_llama"
weights_path = "{reranker}"
context_len = {PAIR_CONTEXT}
initial_tier = "tier1_gpu_vram"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "chat.gguf"
context_len = 4096
initial_tier = "tier1_gpu_vram"
"""


def rerank_secs(base: str, model: str, docs: list[str]) -> float:
    t0 = time.perf_counter()
    r = httpx.post(base + "/v1/rerank", json={"model": model, "query": QUERY,
                                              "documents": docs}, timeout=1800)
    if r.status_code != 200:
        raise SystemExit(f"{base} answered {r.status_code}: {r.text[:500]}")
    assert len(r.json()["results"]) == len(docs)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reranker", type=Path, help="a reranker GGUF (default: the tiny one)")
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("HYPNOS_MODELS_DIR", ROOT / "models")))
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--chat-docs", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-bench-rerank-"))
    models = tmp / "models"
    models.mkdir()
    if args.reranker is None:
        weights = write_tiny_reranker(models / "tiny-reranker.gguf")
    else:
        weights = models / args.reranker.name
        os.link(args.reranker, weights)
    os.link(args.models_dir / CHAT, models / "chat.gguf")
    (tmp / "hypnos.toml").write_text(config(models, weights.name))
    docs, chat_docs = documents(args.docs), documents(args.chat_docs)
    binary = CACHE / f"llama-server-{LLAMA_CPP_PYTHON}"
    hypnos = ServerProcess(tmp / "hypnos.toml", tmp / "hypnos.log", ready_timeout=300)
    server = None
    if binary.is_file():
        server = LlamaServer(binary, weights, args.threads, tmp / "llama-server.log",
                             context=PAIR_CONTEXT * PARALLEL, slots=PARALLEL,
                             extra=("--rerank", "-b", str(PAIR_CONTEXT), "-ub",
                                    str(PAIR_CONTEXT)))
    else:
        print(f"llama-server baseline missing: no {binary} "
              "(python bench/llama_server.py --build-only builds it)")
    try:
        # One warm-up each: loads, first graphs.
        rerank_secs(hypnos.base, "reranker", docs[:4])
        rerank_secs(hypnos.base, "chat", chat_docs[:2])
        if server is not None:
            rerank_secs(server.base, "reranker", docs[:4])
        ours, theirs, judged = [], [], []
        for _ in range(args.runs):
            ours.append(len(docs) / rerank_secs(hypnos.base, "reranker", docs))
            if server is not None:
                theirs.append(len(docs) / rerank_secs(server.base, "reranker", docs))
            judged.append(len(chat_docs) / rerank_secs(hypnos.base, "chat", chat_docs))
    finally:
        hypnos.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    what = "tiny generated reranker" if args.reranker is None else args.reranker.name
    print(f"threads {args.threads}, runs {args.runs} (medians), reranker: {what}")
    rank, chat = statistics.median(ours), statistics.median(judged)
    print(f"hypnos rank pooling      {rank:9.1f} docs/s  ({args.docs} documents)")
    print(f"hypnos chat judgement    {chat:9.1f} docs/s  ({args.chat_docs} documents, "
          "qwen2.5-coder:0.5b)")
    if theirs:
        base = statistics.median(theirs)
        print(f"llama-server --rerank    {base:9.1f} docs/s  ({args.docs} documents)")
        print(f"ratio rank pooling, hypnos / llama-server:       {rank / base:.2f}")
        print(f"ratio chat judgement / llama-server rank pooling: {chat / base:.3f}")
    else:
        print("ratios: baseline missing")


if __name__ == "__main__":
    main()
