"""Model swaps: Hypnos against llama-server's router mode on the same GGUFs, in one run.

N copies of the chat GGUF (SmolLM2-135M unless --gguf says otherwise) in one folder; at most
K of them loaded at a time: llama-server ``--models-dir DIR --models-max K`` (one child
process per loaded model) against `hypnos serve` on a simulated CPU-only budget whose tier 1
holds K of them (tier 2 the others' weights). Same threads (``-t/-tb``; the whole run pinned to
``--threads`` CPUs), same context and slots, greedy answers of ``--tokens`` tokens, streamed
(client TTFT). The two servers take turns run by run, so a load change on the shared machine
falls on both. Workloads:

  (a) round-robin over N=3 models, one client: every request is a swap (the must-have)
  (b) skewed mix over N=3 (60 / 30 / 10 %, fixed seed), one client
  (c) two models alternating under 4 concurrent clients
  (d) multi-turn: one conversation per model, turns alternating between the models (every
      turn a swap; a conversation's earlier turns are what KV parking keeps)

Printed per workload: total time (median over runs), p50/p95 request latency, p50 TTFT,
Hypnos / router ratios, the load average beside them, and for Hypnos its tier 2 -> 1
promotions (telemetry ``tier_switch_latency_ms`` and phases) against two floors measured in
the same run: the weights' bytes and the context's bytes over this machine's memory copy
bandwidth (numpy, one thread).

    python bench/swap_workload.py [--threads 1] [--runs 3] [--only a,b,c,d] [--tokens 16]
                                  [--requests 18] [--context 2048] [--k 1]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ManagedProcess, ServerProcess  # noqa: E402
from llama_server import GGUF, LLAMA_CPP_PYTHON, llama_server_binary  # noqa: E402

TOPICS = ["a fox who learns to sail", "a robot lighthouse keeper", "the last tea shop on Mars",
          "a dragon who collects maps", "a clock that runs backwards", "a city under the ice"]
SYSTEM = {"role": "system", "content": "You are a storyteller. Answer with a short story."}


# --------------------------------------------------------------------------- servers

class Router(ManagedProcess):
    """llama-server in router mode: no model of its own, children per model on demand."""

    def __init__(self, binary: Path, models_dir: Path, k: int, context: int, slots: int,
                 threads: int, log_path: Path, env: dict | None = None):
        from hypnos.engines.llama.cpu import extra_buffers_ok
        # Where Hypnos keeps weights out of llama.cpp's extra buffer types (an AMX host, whose
        # AMX matmul in this llama.cpp dies with SIGSEGV), the children do too.
        same = [] if extra_buffers_ok() else ["--no-repack"]
        super().__init__(
            lambda port: [str(binary), "--models-dir", str(models_dir), "--models-max", str(k),
                          "-c", str(context), "--parallel", str(slots), "-t", str(threads),
                          "-tb", str(threads), "-ngl", "0", *same, "--host", "127.0.0.1",
                          "--port", str(port)],
            log_path, "/health", 120, env=env)


def hypnos_config(models_dir: Path, names: list[str], context: int, slots: int, k: int,
                  kv_park: bool | None) -> tuple[str, int]:
    """Models ``names`` and a simulated CPU-only host whose tier 1 (half the RAM) holds ``k``
    of them: RAM = 2 x (k + 1/2) x one model's tier-1 booking. Also returns the bytes of one
    model's KV cache (what a promotion from a kept engine allocates and clears)."""
    from hypnos.planner import place
    from hypnos.planner.types import PlacementRequest
    from hypnos.service.config.schema import ModelConfig
    from hypnos.service.scheduling.build import model_shape
    path = models_dir / f"{names[0]}.gguf"
    cfg = ModelConfig(id=names[0], modality="text_generation", engine="ggml_llama",
                      weights_path=str(path), context_len=context, slots=slots)
    shape = model_shape(cfg, {"weights_path": path})
    one = place(PlacementRequest(shape, 1 << 40, slots=slots,
                                 context_len=context)).booked_tier1_bytes
    ram = int(2 * (k + 0.5) * one)
    if ram // 4 < (len(names) - k) * shape.weights_bytes:
        print(f"note: tier 2 ({ram // 4} B) is smaller than the {len(names) - k} idle models' "
              f"weights; some demotions go to tier 3", flush=True)
    text = f'models_dir = "{models_dir}"\n'
    text += "[hardware]\n" + (f"kv_park = {str(kv_park).lower()}\n" if kv_park is not None
                              else "")
    text += f"[hardware.simulate]\nvram_bytes = 0\nram_bytes = {ram}\n"
    for name in names:
        text += (f'[[models]]\nid = "{name}"\nmodality = "text_generation"\n'
                 f'engine = "ggml_llama"\nweights_path = "{name}.gguf"\nslots = {slots}\n'
                 f'context_len = {context}\n')
    return text, shape.kv_bytes_per_token * context


# --------------------------------------------------------------------------- requests

class Result:
    def __init__(self, model: str, latency_ms: float, ttft_ms: float, tele: dict | None,
                 answer: str):
        self.model, self.latency_ms, self.ttft_ms = model, latency_ms, ttft_ms
        self.tele, self.answer = tele, answer


def stream_chat(http: httpx.Client, base: str, model: str, messages: list[dict],
                tokens: int) -> Result:
    body = {"model": model, "messages": messages, "max_tokens": tokens, "temperature": 0,
            "stream": True}
    t0 = time.perf_counter()
    first, tele, parts = None, None, []
    with http.stream("POST", base + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            tele = chunk.get("hypnos_telemetry", tele)
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    parts.append(piece)
                    if first is None:
                        first = time.perf_counter()
    end = time.perf_counter()
    return Result(model, (end - t0) * 1e3, ((first or end) - t0) * 1e3, tele, "".join(parts))


def client() -> httpx.Client:
    """A connection per request, both sides alike: the router closes a proxied stream's
    connection without saying so, and a kept-alive one then fails the next request."""
    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def one_client(base: str, plan: list[tuple[str, list[dict]]], tokens: int) -> list[Result]:
    with client() as http:
        return [stream_chat(http, base, model, msgs, tokens) for model, msgs in plan]


def ask(i: int) -> list[dict]:
    return [SYSTEM, {"role": "user",
                     "content": f"Story {i}: write about {TOPICS[i % len(TOPICS)]}."}]


def workload(kind: str, names: list[str], requests: int) -> list[list[tuple[str, list]]]:
    """The clients' request plans (model, messages); (d) is built turn by turn instead."""
    if kind == "a":
        return [[(names[i % 3], ask(i)) for i in range(requests)]]
    if kind == "b":
        rng = random.Random(19)
        return [[(rng.choices(names[:3], weights=(6, 3, 1))[0], ask(i))
                 for i in range(requests)]]
    if kind == "c":
        per = max(1, requests // 4)
        return [[(names[(c + j) % 2], ask(c * per + j)) for j in range(per)] for c in range(4)]
    raise ValueError(kind)


def run_workload(kind: str, base: str, names: list[str], requests: int,
                 tokens: int) -> tuple[float, list[Result]]:
    """Wall time of the whole workload (ms) and every request's result."""
    t0 = time.perf_counter()
    if kind == "d":
        results = multi_turn(base, names[:2], requests, tokens)
    else:
        plans = workload(kind, names, requests)
        out: list[list[Result]] = [[] for _ in plans]

        def go(i: int) -> None:
            out[i] = one_client(base, plans[i], tokens)
        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(plans))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results = [r for rs in out for r in rs]
    return (time.perf_counter() - t0) * 1e3, results


def multi_turn(base: str, names: list[str], turns: int, tokens: int) -> list[Result]:
    """One conversation per model; turns alternate between the models (each one a swap)."""
    convs = {m: [SYSTEM, {"role": "user", "content": f"Tell me about {TOPICS[i]}."}]
             for i, m in enumerate(names)}
    results = []
    with client() as http:
        for t in range(turns):
            model = names[t % len(names)]
            r = stream_chat(http, base, model, convs[model], tokens)
            results.append(r)
            convs[model] += [{"role": "assistant", "content": r.answer},
                             {"role": "user", "content": f"And then? ({t})"}]
    return results


# --------------------------------------------------------------------------- floors

def copy_bandwidth(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes per second one thread copies here (numpy, best of ``repeats``)."""
    import numpy as np
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    return nbytes / best


def first_touch(nbytes: int, repeats: int = 5) -> float:
    """Milliseconds to allocate ``nbytes`` fresh and write them once (best of ``repeats``):
    what llama.cpp's clear of a new KV cache costs at least."""
    import numpy as np

    def once() -> None:
        buf = np.empty(nbytes, dtype=np.uint8)
        buf.fill(0)
        del buf
    return min(_timed(once) for _ in range(repeats)) * 1e3


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def ratio_of(mine: list[Result], theirs: list[Result], field: str, q: float) -> float:
    return pct([getattr(x, field) for x in mine], q) / pct([getattr(x, field) for x in theirs], q)


# --------------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--gguf", default=GGUF, help="the GGUF (under --models-dir) copied N times")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=18)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--k", type=int, default=1, help="models loaded at most (tier 1 / router)")
    ap.add_argument("--only", default="a,b,c,d")
    ap.add_argument("--router-thp", action="store_true",
                    help="give the router (and its children) glibc's huge-page tunable too")
    ap.add_argument("--hypnos-only", action="store_true",
                    help="no router (its ratios are left out): Hypnos's own figures")
    ap.add_argument("--kv-park", choices=("default", "on", "off"), default="default",
                    help="Hypnos hardware.kv_park (default: the server's default)")
    args = ap.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    threads = len(os.sched_getaffinity(0))
    binary = None if args.hypnos_only else llama_server_binary()
    kinds = [k for k in args.only.split(",") if k]
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-swap-"))
    models = tmp / "models"
    models.mkdir()
    names = [f"m{i}" for i in range(1, 4)]
    src = args.models_dir / args.gguf
    for name in names:                    # real copies: each has its own page-cache pages
        shutil.copyfile(src, models / f"{name}.gguf")
    park = {"default": None, "on": True, "off": False}[args.kv_park]
    config, kv_bytes = hypnos_config(models, names, args.context, args.slots, args.k, park)
    (tmp / "hypnos.toml").write_text(config)
    bandwidth, first_touch_ms = copy_bandwidth(), first_touch(kv_bytes)
    srv = router = None
    try:
        srv = ServerProcess(tmp / "hypnos.toml", tmp / "hypnos.log")
        sides = {"hypnos": srv.base}
        if not args.hypnos_only:
            env = None
            if args.router_thp:         # the same huge-page tunable as hypnos serve gives itself
                from hypnos.cli.malloc_thp import TUNABLE
                env = {**os.environ, "GLIBC_TUNABLES": f"{TUNABLE}=1"}
            router = Router(binary, models, args.k, args.context, args.slots, threads,
                            tmp / "router.log", env)
            sides["router"] = router.base
        tunables = next((v.split("=", 1)[1] for v in Path(f"/proc/{srv.proc.pid}/environ")
                         .read_bytes().decode(errors="replace").split("\0")
                         if v.startswith("GLIBC_TUNABLES=")), "unset")
        for base in sides.values():       # warm up: every model loaded once, pages cached
            one_client(base, [(n, ask(0)) for n in names], 2)
        totals: dict[str, dict[str, list[float]]] = {k: {s: [] for s in sides} for k in kinds}
        results: dict[str, dict[str, list[Result]]] = {k: {s: [] for s in sides} for k in kinds}
        loads: dict[str, list[float]] = {k: [] for k in kinds}
        for run in range(args.runs):
            for kind in kinds:
                for side, base in (sides.items() if run % 2 == 0 else
                                   reversed(list(sides.items()))):
                    total, rs = run_workload(kind, base, names, args.requests, args.tokens)
                    totals[kind][side].append(total)
                    results[kind][side].extend(rs)
                loads[kind].append(os.getloadavg()[0])
    finally:
        for p in (srv, router):
            if p is not None:
                p.stop()
    print(f"hypnos serve GLIBC_TUNABLES: {tunables}; router's: "
          f"{'glibc.malloc.hugetlb=1' if args.router_thp else 'unset'}")
    report(args, threads, src, (bandwidth, kv_bytes, first_touch_ms), kinds, totals, results,
           loads)
    shutil.rmtree(tmp, ignore_errors=True)


def report(args, threads, src, floors, kinds, totals, results, loads) -> None:
    bandwidth, kv_bytes, first_touch_ms = floors
    size = src.stat().st_size
    print(f"model {src.name} x3 copies ({size / 2**20:.1f} MiB each), {threads} threads, "
          f"context {args.context}, {args.slots} slot(s), K={args.k} loaded at most, "
          f"{args.tokens} tokens per answer, {args.requests} requests per workload, "
          f"{args.runs} runs taking turns; llama-server router from llama-cpp-python "
          f"{LLAMA_CPP_PYTHON}'s llama.cpp; kv_park {args.kv_park}")
    names = {"a": "(a) round-robin N=3, 1 client", "b": "(b) skewed 60/30/10 N=3, 1 client",
             "c": "(c) 2 models alternating, 4 clients",
             "d": "(d) multi-turn, 2 models alternating"}
    for kind in kinds:
        h, hr = totals[kind]["hypnos"], results[kind]["hypnos"]
        load = f"load avg {min(loads[kind]):.2f}-{max(loads[kind]):.2f}"
        if "router" not in totals[kind]:
            print(f"{names[kind]}: total hypnos {statistics.median(h) / 1e3:6.2f} s; {load}")
        else:
            r, rr = totals[kind]["router"], results[kind]["router"]
            ratio = statistics.median(h) / statistics.median(r)
            target = " (target <= 0.5)" if kind == "a" else ""
            print(f"{names[kind]}: total hypnos {statistics.median(h) / 1e3:6.2f} s  router "
                  f"{statistics.median(r) / 1e3:6.2f} s  ratio {ratio:.2f}{target}; {load}")
        for side, rs in results[kind].items():
            lat = [x.latency_ms for x in rs]
            ttft = [x.ttft_ms for x in rs]
            print(f"    {side:7s} latency p50 {pct(lat, .5):7.1f} ms  p95 {pct(lat, .95):7.1f} ms"
                  f"  TTFT p50 {pct(ttft, .5):7.1f} ms  p95 {pct(ttft, .95):7.1f} ms")
        if "router" in results[kind]:
            rr = results[kind]["router"]
            lat50, lat95, ttft50 = (ratio_of(hr, rr, f, q) for f, q in (
                ("latency_ms", .5), ("latency_ms", .95), ("ttft_ms", .5)))
            print(f"    ratios hypnos/router: latency p50 {lat50:.2f}  p95 {lat95:.2f}  "
                  f"TTFT p50 {ttft50:.2f}")
        # The requests that did the load (those queued behind it report the tier they found
        # but no phases).
        promos = [x.tele for x in hr if x.tele and "tier_switch_phases" in x.tele and
                  x.tele.get("previous_tier") == "tier2_pinned_ram"]
        if promos:
            sw = [p["tier_switch_latency_ms"] for p in promos]
            phases = [p.get("tier_switch_phases", {}) for p in promos]
            ctx = [p.get("context_ms", 0.0) for p in phases]
            modes = sorted({p.get("load_mode", "?") for p in phases})
            kv = [p["kv_restored_tokens"] for p in phases if "kv_restored_tokens" in p]
            print(f"    hypnos tier 2 -> 1 promotions: {len(promos)}, switch p50 "
                  f"{pct(sw, .5):.1f} ms  p95 {pct(sw, .95):.1f} ms; context build p50 "
                  f"{pct(ctx, .5):.1f} ms; load_mode {','.join(modes)}"
                  + (f"; KV restored p50 {pct(kv, .5):.0f} tokens" if kv else ""))
    print(f"floors (copy bandwidth {bandwidth / 1e9:.1f} GB/s, one thread): the weights "
          f"{size / 2**20:.1f} MiB copied once = {size / bandwidth * 1e3:.1f} ms (what a "
          f"promotion that reads them again cannot beat); the KV cache "
          f"{kv_bytes / 2**20:.1f} MiB freshly allocated and written once (page faults "
          f"included) = {first_touch_ms:.1f} ms (what building a context cannot beat); "
          f"target: promotion <= 50 ms")


if __name__ == "__main__":
    main()
