"""Embeddings throughput (texts/s) through a real `hypnos serve` against the same ONNX engine
called in-process, on the same texts in the same request-sized batches.

Prints, for the default lineup's all-MiniLM-L6-v2 int8:
  - texts/s through POST /v1/embeddings with encoding_format "float" and "base64"
    (median of --runs passes over --texts texts, --per-request texts per request, one
    request at a time over one keep-alive connection, after one warm-up pass);
  - texts/s of OnnxEmbedder.embed called directly on the same batches;
  - the ratios server / direct.
The three ways alternate within each pass, so load from other work on the machine hits them
alike; the server's engine and the direct one use the same thread count (all CPUs).

    python bench/embeddings.py [--texts 512] [--per-request 32] [--runs 3]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402

ONNX = "minilm-l6-v2/model.int8.onnx"
TOKENIZER = "minilm-l6-v2/tokenizer.json"
WORDS = ("the quick brown fox jumps over a lazy dog while models embed sentences into vectors "
         "that place similar meanings close together for search clustering and retrieval "
         "servers measure throughput latency memory tiers and engines").split()


def make_texts(n: int, seed: int = 7) -> list[str]:
    """Deterministic sentences of 5 to 60 words (about 8 to 80 tokens)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60))) + "."
            for _ in range(n)]


def batches(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]


def server_pass(client: httpx.Client, groups: list[list[str]], fmt: str) -> float:
    """texts/s of one pass over ``groups``, one request per group."""
    t0 = time.perf_counter()
    for g in groups:
        r = client.post("/v1/embeddings", json={"model": "emb", "input": g,
                                                "encoding_format": fmt})
        r.raise_for_status()
    return sum(map(len, groups)) / (time.perf_counter() - t0)


def direct_pass(engine, groups: list[list[str]]) -> float:
    cancel = threading.Event()
    t0 = time.perf_counter()
    for g in groups:
        engine.embed(g, cancel)
    return sum(map(len, groups)) / (time.perf_counter() - t0)


def direct_engine(models_dir: Path):
    from hypnos.engines.records import LoadSpec
    from hypnos.engines.onnx_embed import OnnxEmbedder
    onnx, tok = models_dir / ONNX, models_dir / TOKENIZER
    engine = OnnxEmbedder()
    engine.load(LoadSpec("emb", onnx, {"weights_path": onnx, "tokenizer_path": tok}))
    return engine


def measure(srv: ServerProcess, engine, groups, runs: int) -> dict[str, float]:
    """Median texts/s per way. The ways alternate within each run (the server idles while
    the direct engine runs and the other way round), so a load that comes and goes on a
    shared machine hits all three alike. The first run warms and is not counted."""
    ways = {"float": lambda c: server_pass(c, groups, "float"),
            "base64": lambda c: server_pass(c, groups, "base64"),
            "direct": lambda c: direct_pass(engine, groups)}
    rates: dict[str, list[float]] = {k: [] for k in ways}
    with httpx.Client(base_url=srv.base, timeout=600) as client:
        for run in range(runs + 1):
            for name, way in ways.items():
                rate = way(client)
                if run:
                    rates[name].append(rate)
    return {k: statistics.median(v) for k, v in rates.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--texts", type=int, default=512)
    ap.add_argument("--per-request", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    groups = batches(make_texts(args.texts), args.per_request)
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-bench-"))
    cfg = tmp / "hypnos.toml"
    cfg.write_text(f'models_dir = "{args.models_dir}"\n[[models]]\nid = "emb"\n'
                   f'modality = "embeddings"\nengine = "onnx_runtime"\n'
                   f'weights_path = "{ONNX}"\ntokenizer_path = "{TOKENIZER}"\n'
                   f'initial_tier = "tier1_gpu_vram"\n')
    srv = ServerProcess(cfg, tmp / "server.log")
    engine = direct_engine(args.models_dir)
    try:
        rates = measure(srv, engine, groups, args.runs)
    finally:
        srv.stop()
        engine.unload()
    base = rates.pop("direct")
    print(f"embedding model: {ONNX}; {args.texts} texts, {args.per_request} per request, "
          f"median of {args.runs} passes")
    for fmt, rate in rates.items():
        print(f"through the server ({fmt:6}): {rate:8.1f} texts/s")
    print(f"onnxruntime direct (OnnxEmbedder): {base:8.1f} texts/s")
    for fmt, rate in rates.items():
        print(f"ratio server/direct ({fmt}): {rate / base:.2f}")


if __name__ == "__main__":
    main()
