"""A chat model split across RPC workers against the same model whole, on one machine.

Starts two ``hypnos rpc-worker`` processes on 127.0.0.1 and two ``hypnos serve``: one whose
simulated tier 1 is too small for SmolLM2 (10 of its 30 layers local, 10 on each worker, the
second one also holding the output head; sized like tests/e2e/test_rpc_split.py) and one
with the model whole. Prints the split placement as a table, the first load's time, the
decode tokens/s of each (median of ``--runs``, the servers taking turns) and whether the
greedy answers are equal.

    python bench/rpc_split.py [--runs 3] [--tokens 128] [--worker-threads 1]

Loopback costs no network time, but every token still crosses two process boundaries (the
activations of each layer boundary over TCP): the figure is an upper bound on what a LAN
gives, not a measure of one.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess, free_port  # noqa: E402

GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT = 2048
ASK = [{"role": "user", "content": "Write a long story about a fox who learns to sail."}]


def sizes(models: Path) -> tuple[int, int, int]:
    """Simulated RAM (tier 1 = half) and the two workers' memory for a 10/10/10 split."""
    from hypnos.engines.gguf_meta import read_gguf_meta
    shape = read_gguf_meta(models / GGUF).to_shape()
    unit = shape.layer_bytes + -(-shape.kv_bytes_per_token * CONTEXT // shape.num_layers)
    local = shape.non_layer_bytes + shape.workspace_bytes + 10 * unit + unit // 2
    first = shape.workspace_bytes + 10 * unit + unit // 2
    last = shape.workspace_bytes + shape.non_layer_bytes + 10 * unit + unit // 2
    return 2 * local, first, last


def config(models: Path, workers: list[tuple[int, int]] | None, ram: int) -> str:
    text = f'models_dir = "{models}"\n[limits]\nrepetition_loop_tokens = 0\n[hardware]\n' \
           'kv_park = false\n'
    if workers:
        text += f"[hardware.simulate]\nram_bytes = {ram}\n"
        for port, memory in workers:
            text += (f'[[hardware.rpc_workers]]\nendpoint = "127.0.0.1:{port}"\n'
                     f"memory_bytes = {memory}\n")
    return text + (f'[[models]]\nid = "chat"\nmodality = "text_generation"\n'
                   f'engine = "ggml_llama"\nweights_path = "{GGUF}"\ncontext_len = {CONTEXT}\n')


def ask(base: str, tokens: int) -> dict:
    r = httpx.post(base + "/v1/chat/completions", timeout=900, json={
        "model": "chat", "messages": ASK, "max_tokens": tokens, "temperature": 0})
    r.raise_for_status()
    return r.json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--worker-threads", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-rpc-bench-"))
    ram, first, last = sizes(args.models_dir)
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "hypnos.cli", "rpc-worker", "--port",
                               str(p), "--threads", str(args.worker_threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
             for p in ports]
    time.sleep(2)
    servers = []
    try:
        for name, workers in (("split", list(zip(ports, (first, last), strict=True))),
                              ("local", None)):
            path = tmp / f"{name}.toml"
            path.write_text(config(args.models_dir, workers, ram))
            servers.append(ServerProcess(path, tmp / f"{name}.log"))
        split, local = servers
        loads = {name: ask(s.base, 8)["hypnos_telemetry"] for name, s in
                 (("split", split), ("local", local))}
        rates: dict[str, list[float]] = {"split": [], "local": []}
        texts: dict[str, str] = {}
        for _ in range(args.runs):
            for name, s in (("split", split), ("local", local)):
                reply = ask(s.base, args.tokens)
                rates[name].append(reply["hypnos_telemetry"]["engine"]["decode_tokens_per_s"])
                texts[name] = reply["choices"][0]["message"]["content"]
        status = split.get("/v1/memory/status")
        report(status, loads, rates, texts, args)
    finally:
        for s in servers:
            s.stop()
        for p in procs:
            p.kill()


def report(status: dict, loads: dict, rates: dict, texts: dict, args) -> None:
    model = status["models"][0]
    placement = model["placement"]
    print(f"SmolLM2-135M Q4_1, context {CONTEXT}, {args.tokens} tokens, median of "
          f"{args.runs}; workers {args.worker_threads} thread(s) each")
    print("| part | layers | booked bytes | llama.cpp put there |")
    print("|---|---|---|---|")
    split = model.get("split_layers", {})
    print(f"| local (tier 1) | 0-{placement['gpu_layers'] - 1} | "
          f"{placement['vram_weight_bytes'] + placement['vram_kv_and_workspace_bytes']} | "
          f"{split.get('local')} |")
    for share in placement["rpc_workers"]:
        end = share["first_layer"] + share["layers"] - 1
        head = " + output head" if share["output_head"] else ""
        print(f"| {share['endpoint']} | {share['first_layer']}-{end}{head} | "
              f"{share['booked_bytes']} | {split.get(share['endpoint'])} |")
    for name in ("split", "local"):
        print(f"{name}: first load {loads[name]['tier_switch_latency_ms']:.0f} ms, decode "
              f"{statistics.median(rates[name]):.1f} tokens/s (runs: "
              f"{', '.join(f'{r:.1f}' for r in rates[name])})")
    print(f"greedy answers equal: {texts['split'] == texts['local']}")


if __name__ == "__main__":
    main()
