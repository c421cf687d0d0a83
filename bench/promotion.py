"""Tier promotion times and decode speed of the chat model, through a real `hypnos serve`.

Prints, for the default lineup's chat model (SmolLM2-135M unless --weights says otherwise):
  - tier-3 -> 1 and tier-2 -> 1 promotion times (median of --runs), and their ratio;
    before each tier-3 run the weights are dropped from the page cache
    (posix_fadvise DONTNEED, and /proc/sys/vm/drop_caches when writable);
  - single-request decode tokens/s through the server against llama-cpp-python called
    directly in the same run, and the ratio server / direct.

    python bench/promotion.py [--runs 5] [--tokens 128]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402

GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = [{"role": "user", "content": "Write a long story about a fox who learns to sail."}]


def drop_caches(path: Path) -> str:
    from hypnos.engines.page_cache import drop_page_cache, resident_fraction
    drop_page_cache([path])
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        pass
    return f"{resident_fraction(path):.0%} still cached"


def promote(srv: ServerProcess, from_tier: str, weights: Path) -> tuple[float, str]:
    srv.post("/v1/memory/tier", {"model": "chat", "target_tier": from_tier}).raise_for_status()
    note = drop_caches(weights) if from_tier == "tier3_nvme_ssd" else ""
    r = srv.post("/v1/chat/completions", {"model": "chat", "messages": PROMPT, "max_tokens": 1})
    r.raise_for_status()
    return r.json()["hypnos_telemetry"]["tier_switch_latency_ms"], note


def server_decode(srv: ServerProcess, tokens: int) -> float:
    body = {"model": "chat", "messages": PROMPT, "max_tokens": tokens, "temperature": 0}
    srv.post("/v1/chat/completions", body)          # warm: prompt cached, model resident
    r = srv.post("/v1/chat/completions", body).json()
    return r["hypnos_telemetry"]["engine"]["decode_tokens_per_s"]


def direct_decode(weights: Path, tokens: int) -> float:
    from llama_cpp import Llama
    threads = len(os.sched_getaffinity(0))        # the engine's default, for a fair ratio
    llm = Llama(str(weights), n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                verbose=False)
    llm.create_chat_completion(messages=PROMPT, max_tokens=8, temperature=0)
    first = None
    n = 0
    for chunk in llm.create_chat_completion(messages=PROMPT, max_tokens=tokens, temperature=0,
                                            stream=True):
        if chunk["choices"][0]["delta"].get("content"):
            n += 1
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return (n - 1) / (end - first) if n > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    weights = args.models_dir / GGUF
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-bench-"))
    cfg = tmp / "hypnos.toml"
    cfg.write_text(f'models_dir = "{args.models_dir}"\n[[models]]\nid = "chat"\n'
                   f'modality = "text_generation"\nengine = "ggml_llama"\n'
                   f'weights_path = "{GGUF}"\ncontext_len = 2048\n')
    srv = ServerProcess(cfg, tmp / "server.log")
    try:
        cold, warm, notes = [], [], set()
        for _ in range(args.runs):
            ms, note = promote(srv, "tier3_nvme_ssd", weights)
            cold.append(ms)
            notes.add(note)
            warm.append(promote(srv, "tier2_pinned_ram", weights)[0])
        served = server_decode(srv, args.tokens)
    finally:
        srv.stop()
    direct = direct_decode(weights, args.tokens)
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"chat model: {weights.name} ({weights.stat().st_size / 1e6:.0f} MB), {args.runs} runs")
    print(f"tier3 -> tier1 promotion: median {c:8.1f} ms  (page cache after drop: "
          f"{', '.join(sorted(notes))})")
    print(f"tier2 -> tier1 promotion: median {w:8.1f} ms")
    print(f"ratio tier3/tier2: {c / w:.2f}x")
    print(f"decode through the server: {served:6.1f} tokens/s")
    print(f"decode, llama-cpp-python direct: {direct:6.1f} tokens/s")
    print(f"ratio server/direct: {served / direct:.2f}")


if __name__ == "__main__":
    main()
