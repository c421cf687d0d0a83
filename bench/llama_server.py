"""Hypnos's chat engine against llama.cpp's own ``llama-server``, measured in one run.

Builds ``llama-server`` from the llama.cpp source inside the llama-cpp-python sdist that
Hypnos itself runs (same version, same compiler flags family), caches the binary under
/tmp/hypnos-llama-server/ (reruns skip the ~10-minute build; nothing is committed), then
runs both servers at once on the same GGUF with the same threads and context, taking turns
run by run (a load change on a shared machine then falls on both), and prints medians:

  (a) single-request decode tokens/s, Hypnos / llama-server          (target >= 0.95)
  (b) aggregate tokens/s of 4 concurrent requests, 4 slots each side (target >= 0.9)
  (c) TTFT of a 2,000-token prompt whose first 1,900 tokens were sent before, warm / cold
      (target <= 0.2), for Hypnos and for llama-server as a reference
  (d) next-turn time of a parked 2,000-token conversation after a model swap, restored /
      re-prefilled (target <= 0.3); measured in-process on the engine (park, unload, load,
      restore vs unload, load), since the server wires parking in separately.

    python bench/llama_server.py [--threads N] [--tokens 128] [--runs 5] [--build-only]
                                 [--tiny | --default-model [--prefill-sizes 2000,6000,18000]
                                 [--json PATH]]

``--tiny`` runs (a) and (b) only, on a generated 2-layer, 64-wide random-weight llama GGUF
carrying SmolLM2's 49,152-token vocabulary (``tests/tiny_llama.py``, written to a temporary
directory, never committed): its decode step costs about what a GPU step of a small model
does, so the ratios show what each server's own loop adds to every token.

``--default-model`` measures the default lineup's chat model (Qwen2.5-Coder-0.5B-Instruct
Q4_K_M) with every thread, 4 slots of 20,480 tokens each side, each server on its own
defaults, all of them printed first: (a), (b), prefill of fresh 2k / 6k / 18k-token prompts,
and the same prefill while 3 other slots decode (``llama_server_default.py``; ``--tokens``
defaults to 200 there); ``--lineup`` adds the lineup's other llama models to Hypnos, idle.

``--threads N`` pins the whole run to N CPUs: `hypnos serve` gives its engine every CPU
the process may use, and llama-server gets ``-t N -tb N``, so both run N threads.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ManagedProcess, ServerProcess  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from tiny_llama import SMOLLM2, write_tiny_llama  # noqa: E402

LLAMA_CPP_PYTHON = "0.3.36"
CACHE = Path("/tmp/hypnos-llama-server")
GGUF = SMOLLM2
TINY = "tiny-llama.gguf"
CONTEXT = 8192
SLOTS = 4
STORY = "Write a long story about a fox who learns to sail."
TOPICS = ["a fox who learns to sail", "a robot lighthouse keeper", "the last tea shop on Mars",
          "a dragon who collects maps"]


# --------------------------------------------------------------------------- build

def llama_server_binary() -> Path:
    """The cached llama-server, built once from the llama-cpp-python sdist's llama.cpp."""
    binary = CACHE / f"llama-server-{LLAMA_CPP_PYTHON}"
    if binary.is_file():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hypnos-llama-src-") as tmp:
        tmp = Path(tmp)
        print(f"building llama-server from llama-cpp-python=={LLAMA_CPP_PYTHON} "
              f"(cached in {CACHE})", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(tmp)],
                       check=True)
        sdist = next(tmp.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        src = next(tmp.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = tmp / "build"
        jobs = os.environ.get("HYPNOS_BUILD_JOBS", "2")
        nice = ["nice", "-n", "10"]
        subprocess.run(nice + ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
                               "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
                               "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
                               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                               "-DBUILD_SHARED_LIBS=OFF"], check=True)
        subprocess.run(nice + ["cmake", "--build", str(build), "--target", "llama-server",
                               "-j", jobs], check=True)
        built = next(build.glob("bin/llama-server"))
        shutil.copy2(built, binary.with_suffix(".tmp"))
        binary.with_suffix(".tmp").rename(binary)
    return binary



# --------------------------------------------------------------------------- servers

class LlamaServer(ManagedProcess):
    """llama.cpp's llama-server on a free port, same GGUF, threads and context; ``extra``
    are further arguments (``--jinja``). On a CPU with AMX it runs ``--no-repack``, as
    Hypnos's engine keeps weights out of the extra buffer types there (``engines/llama/cpu``:
    this llama.cpp's AMX matmul crashes)."""

    def __init__(self, binary: Path, weights: Path, threads: int, log_path: Path,
                 context: int = CONTEXT, slots: int = SLOTS, extra: tuple[str, ...] = ()):
        from hypnos.engines.llama.cpu import extra_buffers_ok
        if not extra_buffers_ok():
            extra = ("--no-repack", *extra)
        super().__init__(
            lambda port: [str(binary), "-m", str(weights), "-c", str(context), "--parallel",
                          str(slots), "-t", str(threads), "-tb", str(threads), "-ngl", "0",
                          "--host", "127.0.0.1", "--port", str(port), *extra],
            log_path, "/health", 120)


def chat(base: str, messages: list[dict], max_tokens: int, extra: dict) -> dict:
    body = {"model": "chat", "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, **extra}
    r = httpx.post(base + "/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return r.json()


def decode_rate(reply: dict) -> float:
    """Decode tokens/s as the server measured it (Hypnos telemetry / llama-server timings)."""
    if "hypnos_telemetry" in reply:
        return reply["hypnos_telemetry"]["engine"]["decode_tokens_per_s"]
    return reply["timings"]["predicted_per_second"]


def ttft_ms(base: str, messages: list[dict], extra: dict) -> float:
    """Client-side time to the first streamed content piece."""
    body = {"model": "chat", "messages": messages, "max_tokens": 4, "temperature": 0,
            "stream": True, **extra}
    t0 = time.perf_counter()
    first = None
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if first is None and line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[6:])["choices"][0].get("delta", {})
                if delta.get("content"):
                    first = time.perf_counter()
    return ((first or time.perf_counter()) - t0) * 1e3


def aggregate_rate(base: str, max_tokens: int, extra: dict) -> float:
    """Completion tokens/s of 4 concurrent requests, first send to last answer."""
    counts: list[int] = []

    def one(topic: str) -> None:
        reply = chat(base, [{"role": "user", "content": f"Write a long story about {topic}."}],
                     max_tokens, extra)
        counts.append(reply["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one, args=(t,)) for t in TOPICS]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


# --------------------------------------------------------------------------- prompts

class Prompts:
    """Deterministic filler text sized in this model's tokens (counted by the engine)."""

    WORDS = ("river stone lantern harbour violet engine quiet market orchard signal copper "
             "meadow ladder winter canvas thunder pocket garden silver mirror").split()

    def __init__(self, engine):
        self.engine = engine

    def text(self, seed: int, tokens: int) -> str:
        """The longest run of ``seed``'s words that takes at most ``tokens`` tokens."""
        import random
        rng = random.Random(seed)
        words: list[str] = []
        count = lambda n: self.engine.count_tokens(" ".join(words[:n]))  # noqa: E731
        while not words or count(len(words)) < tokens:      # doubling, 64 words at a time
            for _ in range(max(1, len(words) // 64)):
                words.extend(rng.choice(self.WORDS) for _ in range(64))
        low, high = 0, len(words)       # count(low) <= tokens; a word adds a token or more
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if count(mid) <= tokens else (low, mid - 1)
        return " ".join(words[:low])

    def conversation(self, seed: int, prefix_tokens: int, tail_tokens: int) -> tuple[list, list]:
        """(the first request, the longer one sharing its first ``prefix_tokens``)."""
        system = {"role": "system", "content": "Notes: " + self.text(seed, prefix_tokens)}
        first = [system, {"role": "user", "content": "Summarise the notes."}]
        tail = self.text(seed + 1, tail_tokens)
        return first, [system, {"role": "user", "content": f"{tail}. Which word is first?"}]


# --------------------------------------------------------------------------- measures

class Target:
    """One server under test and what its requests carry besides the OpenAI fields."""

    def __init__(self, name: str, base: str, extra: dict | None = None):
        self.name, self.base, self.extra = name, base, extra or {}
        self.single: list[float] = []
        self.aggregate: list[float] = []
        self.ttft_warm: list[float] = []
        self.ttft_cold: list[float] = []

    def medians(self) -> dict[str, float]:
        return {k: statistics.median(getattr(self, k))
                for k in ("single", "aggregate", "ttft_warm", "ttft_cold") if getattr(self, k)}


def measure_servers(targets: list[Target], prompts: Prompts | None, runs: int,
                    tokens: int) -> None:
    """(a)-(c), the servers taking turns run by run, so that a load change on a shared
    machine falls on both sides rather than on one; without ``prompts``, (a) and (b) only."""
    story = [{"role": "user", "content": STORY}]
    for t in targets:
        chat(t.base, story, 8, t.extra)                      # warm: loaded, prompt cached
    for run in range(runs):
        for t in targets:
            t.single.append(decode_rate(chat(t.base, story, tokens, t.extra)))
        for t in targets:
            t.aggregate.append(aggregate_rate(t.base, tokens, t.extra))
        for i, t in enumerate(targets if prompts else []):
            seed = 1000 * (i + 1) + 10 * run
            first, second = prompts.conversation(seed, 1900, 100)
            t.ttft_cold.append(ttft_ms(t.base, prompts.conversation(seed + 5, 1900, 100)[1],
                                       t.extra))
            chat(t.base, first, 1, t.extra)
            t.ttft_warm.append(ttft_ms(t.base, second, t.extra))


def measure_parking(engine, spec, prompts: Prompts, runs: int) -> dict[str, float]:
    """(d): the turn after a swap, restored from a parked state vs re-prefilled."""
    from hypnos.engines.records import ChatRequest
    ask = lambda messages: engine.chat(  # noqa: E731
        ChatRequest(messages=messages, max_tokens=16, temperature=0), None, threading.Event())
    restored_s, cold_s, park_ms, restore_ms, parked_tokens, same = [], [], [], [], 0, 0
    for run in range(runs):
        system = {"role": "system", "content": "Notes: " + prompts.text(500 + run, 1900)}
        turn1 = [system, {"role": "user", "content": "Summarise the notes."}]
        answer = ask(turn1).text
        turn2 = turn1 + [{"role": "assistant", "content": answer},
                         {"role": "user", "content": "Which word comes first?"}]
        t0 = time.perf_counter()
        parked = engine.park()
        park_ms.append((time.perf_counter() - t0) * 1e3)
        parked_tokens = parked.tokens
        engine.unload()
        engine.load(spec)
        n, ms = engine.restore(parked)
        assert n == parked_tokens, (n, parked_tokens)
        restore_ms.append(ms)
        t0 = time.perf_counter()
        warm = ask(turn2)
        restored_s.append(ms / 1e3 + time.perf_counter() - t0)
        engine.unload()
        engine.load(spec)
        t0 = time.perf_counter()
        cold = ask(turn2)
        cold_s.append(time.perf_counter() - t0)
        same += warm.text == cold.text
        engine.load(spec)
    return {"tokens": parked_tokens, "park_ms": statistics.median(park_ms),
            "restore_ms": statistics.median(restore_ms),
            "restored_s": statistics.median(restored_s), "cold_s": statistics.median(cold_s),
            "same": f"{same}/{runs}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=None,
                    help="tokens per answer (default 128; 200 with --default-model)")
    ap.add_argument("--threads", type=int, default=None,
                    help="pin this run (and both servers) to the first N CPUs it may use; "
                         "both engines then run N threads (default: every CPU)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--tiny", action="store_true",
                      help="(a) and (b) only, on a generated tiny GGUF with SmolLM2's "
                           "vocabulary")
    mode.add_argument("--default-model", action="store_true",
                      help="the default lineup's chat model, every thread, 4 slots: (a), (b), "
                           "prefill (e) and prefill while 3 slots decode (f), every flag of "
                           "both servers printed")
    ap.add_argument("--prefill-sizes", default="2000,6000,18000",
                    help="--default-model: prompt sizes of (e) and (f), in tokens")
    ap.add_argument("--json", type=Path, help="--default-model: write the samples here")
    ap.add_argument("--lineup", action="store_true",
                    help="--default-model: Hypnos also holds the default lineup's other llama "
                         "models, each asked once before the runs (idle beside the measured one)")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args()
    if args.tokens is None:
        args.tokens = 200 if args.default_model else 128
    if args.threads:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    binary = llama_server_binary()
    if args.build_only:
        print(binary)
        return
    if args.default_model:
        from llama_server_default import run
        run(binary, args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-bench-"))
    try:
        parking: dict | None = None
        if args.tiny:
            weights = write_tiny_llama(tmp / TINY, args.models_dir / GGUF)
            hyp, base = run_servers(binary, tmp, TINY, tmp, args, None)
        else:
            weights = args.models_dir / GGUF
            hyp, base, parking = with_engine(binary, tmp, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # `hypnos serve` gives its engines every CPU of the process; llama-server gets the same.
    report(weights, len(os.sched_getaffinity(0)), args, hyp, base, parking)


def with_engine(binary: Path, tmp: Path, args) -> tuple[dict, dict, dict]:
    """(a)-(d) on the real GGUF: the in-process engine counts the prompts' tokens and is the
    one (d) parks."""
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import LoadSpec
    spec = LoadSpec("chat", args.models_dir / GGUF, context_len=CONTEXT, slots=SLOTS,
                    threads=len(os.sched_getaffinity(0)))
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        prompts = Prompts(engine)
        parking = measure_parking(engine, spec, prompts, args.runs)
        return *run_servers(binary, args.models_dir, GGUF, tmp, args, prompts), parking
    finally:
        engine.unload()


def run_servers(binary: Path, models_dir: Path, gguf: str, tmp: Path, args,
                prompts: Prompts | None) -> tuple[dict, dict]:
    """Both servers on ``models_dir / gguf`` at once; (a)-(c) medians of each (only (a) and
    (b) without ``prompts``)."""
    threads = len(os.sched_getaffinity(0))
    cfg = tmp / "hypnos.toml"
    # No drafting: llama-server drafts nothing by default, and this compares decode loops.
    cfg.write_text(f'models_dir = "{models_dir}"\n[[models]]\nid = "chat"\n'
                   f'modality = "text_generation"\nengine = "ggml_llama"\n'
                   f'weights_path = "{gguf}"\nslots = {SLOTS}\ncontext_len = {CONTEXT}\n'
                   f'speculative = "off"\n')
    srv = ServerProcess(cfg, tmp / "hypnos.log")
    ref = None
    try:
        ref = LlamaServer(binary, models_dir / gguf, threads, tmp / "llama-server.log")
        # num_ctx pins the per-slot context: without it the server estimates a 2,000-token
        # prompt of short words at chars/3 tokens and rebuilds the model with a larger
        # context, which drops the prefix cache the (c) measure is about.
        hyp = Target("hypnos", srv.base, {"num_ctx": CONTEXT // SLOTS})
        base = Target("llama-server", ref.base)
        measure_servers([hyp, base], prompts, args.runs, args.tokens)
    finally:
        srv.stop()
        if ref is not None:
            ref.stop()
    return hyp.medians(), base.medians()


def report(weights: Path, threads: int, args, hyp: dict, base: dict,
           parking: dict | None) -> None:
    print(f"model {weights.name}, {threads} threads, context {CONTEXT}, {SLOTS} slots, "
          f"{args.tokens} tokens, median of {args.runs} runs; llama-server from "
          f"llama-cpp-python {LLAMA_CPP_PYTHON}'s llama.cpp")
    rows = [
        ("(a) single-request decode tokens/s", "single", "hypnos / llama-server", ">= 0.95"),
        ("(b) aggregate tokens/s, 4 concurrent", "aggregate", "hypnos / llama-server", ">= 0.9"),
    ]
    for title, key, label, target in rows:
        ratio = hyp[key] / base[key]
        print(f"{title}: hypnos {hyp[key]:7.1f}  llama-server {base[key]:7.1f}  "
              f"{label} = {ratio:.2f} (target {target})")
    if parking is None:
        return
    for name, m in (("hypnos", hyp), ("llama-server", base)):
        print(f"(c) TTFT 2,000-token prompt, {name}: 1,900 sent before {m['ttft_warm']:7.1f} ms"
              f"  cold {m['ttft_cold']:7.1f} ms  warm / cold = "
              f"{m['ttft_warm'] / m['ttft_cold']:.2f} (target <= 0.2)")
    print(f"(d) next turn of a parked {parking['tokens']}-token conversation after a swap "
          f"(engine, in-process): park {parking['park_ms']:.1f} ms, restore "
          f"{parking['restore_ms']:.1f} ms, restore + turn {parking['restored_s'] * 1e3:.0f} ms"
          f"  re-prefill turn {parking['cold_s'] * 1e3:.0f} ms  ratio = "
          f"{parking['restored_s'] / parking['cold_s']:.2f} (target <= 0.3); same answer "
          f"restored vs re-prefilled: {parking['same']}")


if __name__ == "__main__":
    main()
