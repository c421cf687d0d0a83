"""``llama_server.py --default-model``: the default chat model with every thread, Hypnos
against llama-server, each on its own default settings.

The model is the default lineup's chat model (the catalog's first ``lineup = true``
text-generation entry: Qwen2.5-Coder-0.5B-Instruct Q4_K_M). Hypnos serves it from the block
the default lineup writes for it (``catalog.blocks.block_fields``, what `hypnos serve` runs
without a config), changed only to ``slots = 4``, a context of 4 x PER_SLOT tokens, so
that an 18,000-token prompt fits one slot, and ``speculative = "off"``: llama-server drafts
nothing by default, and this compares decode loops (``speculative.py --fresh`` measures
Hypnos's default ``auto`` against ``off``); its requests carry ``num_ctx`` = PER_SLOT, so the
server keeps that context rather than estimating one from a prompt's length. llama-server
gets ``-c`` the same total and ``--parallel 4``. Both run every CPU the process may use
(``--threads N`` pins the run to N), llama-server with ``-t N -tb N``. Nothing else is set:
batch sizes, flash attention and KV types are each server's defaults, printed first as each
server reports them (``server_flags.py``).

``--lineup``: Hypnos also holds the default lineup's other llama chat models (SmolLM2-135M), as
`hypnos serve` without a config does, each asked once before the runs and idle after; an idle
model's compute threads must not slow the measured one (``engines/llama/compute_threads``).

Measures, the servers taking turns (their order flips every run), medians over ``--runs``:

  (a) single-request decode tokens/s, greedy, ``--tokens`` tokens (each server's own figure:
      Hypnos ``hypnos_telemetry.engine.decode_tokens_per_s``, llama-server
      ``timings.predicted_per_second``)
  (b) completion tokens / wall time of 4 concurrent requests
  (e) prefill of a prompt of each ``--prefill-sizes`` size that neither server has seen (a
      fresh filler text per run, server and size): each server's own prompt rate (Hypnos
      ``prefill_tokens_per_s``, llama-server ``timings.prompt_per_second``) and client TTFT;
      and where each server's CPU time went meanwhile (``thread_cpu``): its busiest threads,
      as many as it computes with, as a share of the wall time, and its other threads' seconds
  (f) the same while 3 other slots decode long answers (streamed): the prefill's rate and
      TTFT, and the decoders' tokens/s during it (the text they streamed between the
      prefill's send and its first token, counted with the model's tokenizer)
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from harness import ServerProcess
from llama_server import LlamaServer, Prompts, aggregate_rate, chat, decode_rate
from server_flags import hypnos_flags, llama_server_flags, print_flags
from thread_cpu import read as read_thread_cpu
from thread_cpu import split as split_thread_cpu

HERE = Path(__file__).resolve().parent
SLOTS = 4
PER_SLOT = 20480
DECODER_TOKENS = 4096
QUESTION = "\n\nWhich word comes first in the text above?"
# Asked of the 3 decoders in (f): answers that run long, each a different prompt.
DECODERS = ("Write the numbers from 1 to 3000 in English words, one per line.",
            "Write a Python module of forty small string functions, each with a docstring "
            "and a unit test.",
            "Write a long story, chapter by chapter, about a lighthouse keeper and a storm.")


@dataclass
class Side:
    """One server under test: what its requests carry besides the OpenAI fields, and its
    samples by measure."""
    name: str
    base: str
    extra: dict
    pid: int = 0                     # the server process (its threads' CPU time)
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def median(self, key: str) -> float:
        return statistics.median(self.samples[key])


@dataclass
class Streamed:
    sent: float
    first: float | None
    pieces: list[tuple[float, str]]
    final: dict                      # usage / timings / hypnos_telemetry of the last chunks
    ended: float = 0.0


def stream(side: Side, messages: list[dict], max_tokens: int,
           started: threading.Event | None = None,
           stop: threading.Event | None = None) -> Streamed:
    """One streamed greedy request; sets ``started`` at the first content piece and stops
    reading (closing the connection, which cancels it) once ``stop`` is set."""
    body = {"model": "chat", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, **side.extra}
    out = Streamed(time.perf_counter(), None, [], {})
    with httpx.stream("POST", side.base + "/v1/chat/completions", json=body,
                      timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{side.name}: {r.status_code} {r.read()[:500]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            out.final.update({k: chunk[k] for k in ("usage", "timings", "hypnos_telemetry")
                              if chunk.get(k)})
            choices = chunk.get("choices") or [{}]
            piece = (choices[0].get("delta") or {}).get("content")
            if piece:
                now = time.perf_counter()
                out.first = out.first or now
                out.pieces.append((now, piece))
                if started is not None:
                    started.set()
            if stop is not None and stop.is_set():
                break
    out.ended = time.perf_counter()
    if started is not None:
        started.set()                # an empty answer must not leave the caller waiting
    return out


def prefill_figures(s: Streamed) -> tuple[float, float, float, float]:
    """(the server's own prompt tokens/s, client TTFT ms, prompt tokens, cached tokens)."""
    ttft = ((s.first or s.ended) - s.sent) * 1e3
    if "hypnos_telemetry" in s.final:
        engine = s.final["hypnos_telemetry"]["engine"]
        return (engine["prefill_tokens_per_s"], ttft, s.final["usage"]["prompt_tokens"],
                engine.get("cached_tokens", 0))
    t = s.final["timings"]
    return t["prompt_per_second"], ttft, t["prompt_n"] + t.get("cache_n", 0), t.get("cache_n", 0)


def record_prefill(side: Side, key: str, s: Streamed) -> None:
    rate, ttft, prompt, cached = prefill_figures(s)
    for name, value in (("rate", rate), ("ttft", ttft), ("prompt", prompt), ("cached", cached)):
        side.samples[f"{key}_{name}"].append(value)


def busy_prefill(side: Side, messages: list[dict], engine) -> tuple[Streamed, float, int]:
    """(f): 3 decoders stream long answers; once each is decoding, the prompt is sent. The
    prompt's stream, the decoders' tokens/s between its send and its first token, and how
    many decoders had ended before that (an answer that stopped early)."""
    stop = threading.Event()
    started = [threading.Event() for _ in DECODERS]
    results: list[Streamed | None] = [None] * len(DECODERS)

    def decoder(i: int) -> None:
        results[i] = stream(side, [{"role": "user", "content": DECODERS[i]}], DECODER_TOKENS,
                            started[i], stop)

    threads = [threading.Thread(target=decoder, args=(i,)) for i in range(len(DECODERS))]
    for t in threads:
        t.start()
    for e in started:
        e.wait(600)
    try:
        s = stream(side, messages, 4)
    finally:
        stop.set()
        for t in threads:
            t.join()
    time.sleep(1)                    # the cancelled decoders leave their slots
    end = s.first or s.ended
    text = ["".join(p for at, p in r.pieces if s.sent <= at <= end) for r in results]
    tokens = sum(engine.count_tokens(t) for t in text if t)
    return s, tokens / (end - s.sent), sum(r.ended < end for r in results)


def prefill_prompts(prompts: Prompts, runs: int, n_sides: int,
                    sizes: list[int]) -> dict[tuple, list[dict]]:
    """A fresh prompt for every (kind, run, side, size): no server has seen any."""
    out = {}
    for kind in ("idle", "busy"):
        for run in range(runs):
            for i in range(n_sides):
                for k, size in enumerate(sizes):
                    seed = 10_000 + 1000 * run + 100 * (kind == "busy") + 10 * i + k
                    out[kind, run, i, size] = [{"role": "user", "content":
                                                prompts.text(seed, size) + QUESTION}]
    return out


def idle_prefill(side: Side, messages: list[dict], threads: int, key: str) -> None:
    """(e): the prompt alone, with the server's threads' CPU time read around it
    (``thread_cpu``): its ``threads`` compute threads' share of the wall time, and the
    seconds its other threads ran meanwhile."""
    before, t0 = read_thread_cpu(side.pid), time.perf_counter()
    streamed = stream(side, messages, 4)
    busy, rest = split_thread_cpu(before, read_thread_cpu(side.pid),
                                  time.perf_counter() - t0, threads)
    record_prefill(side, key, streamed)
    side.samples[f"{key}_compute_busy"].append(100 * busy)
    side.samples[f"{key}_other_cpu"].append(rest)


def measure(sides: list[Side], prompts: Prompts, engine, runs: int, tokens: int,
            sizes: list[int], threads: int) -> None:
    """(a), (b), (e), (f), the sides taking turns measure by measure, their order flipping
    every run (a load change on a shared machine then falls on both)."""
    t0 = time.perf_counter()
    asks = prefill_prompts(prompts, runs, len(sides), sizes)
    print(f"{len(asks)} prefill prompts written in {time.perf_counter() - t0:.0f} s",
          flush=True)
    story = [{"role": "user", "content": "Write a long story about a fox who learns to sail."}]
    for s in sides:
        chat(s.base, story, 8, s.extra)                      # warm
    for run in range(runs):
        order = list(enumerate(sides))[::1 if run % 2 == 0 else -1]
        for _, s in order:
            s.samples["single"].append(decode_rate(chat(s.base, story, tokens, s.extra)))
        for _, s in order:
            s.samples["aggregate"].append(aggregate_rate(s.base, tokens, s.extra))
        for size in sizes:
            for i, s in order:
                idle_prefill(s, asks["idle", run, i, size], threads, f"idle{size}")
        for size in sizes:
            for i, s in order:
                streamed, decode, ended = busy_prefill(s, asks["busy", run, i, size], engine)
                record_prefill(s, f"busy{size}", streamed)
                s.samples[f"busy{size}_decode"].append(decode)
                s.samples[f"busy{size}_ended"].append(ended)
        print(f"run {run + 1}/{runs} done ({time.perf_counter() - t0:.0f} s)", flush=True)


# --------------------------------------------------------------------------- servers

def chat_entry():
    """The default lineup's chat model (catalog entry)."""
    from hypnos.catalog.catalog import load_catalog
    return next(e for e in load_catalog().lineup() if e.modality == "text_generation")


def lineup_others(entry) -> list:
    """The default lineup's other llama chat models (``--lineup``)."""
    from hypnos.catalog.catalog import load_catalog
    return [e for e in load_catalog().lineup()
            if e.engine == "ggml_llama" and e.modality == "text_generation" and e.id != entry.id]


def hypnos_config(entry, models_dir: Path, others: list = ()) -> tuple[str, str]:
    """(the weights' path under ``models_dir``, the config): the default lineup's block for
    ``entry`` with SLOTS slots of PER_SLOT tokens and no drafting, and the lineup's blocks
    of ``others`` as they are."""
    from hypnos.catalog.blocks import block_fields, render_blocks
    block = block_fields(entry, entry.default_variant())
    block.update(slots=SLOTS, context_len=SLOTS * PER_SLOT, speculative="off")
    blocks = [block] + [block_fields(e, e.default_variant()) for e in others]
    body = render_blocks(blocks, f"The default lineup's block for {entry.id}, "
                                 f"with {SLOTS} slots of {PER_SLOT} tokens"
                                 + (", and its other llama models" if others else "") + ".")
    return block["weights_path"], f'config_version = 1\nmodels_dir = "{models_dir}"\n\n{body}'


def thp_env() -> dict[str, str]:
    """The GLIBC_TUNABLES `hypnos serve` would re-execute itself with (``serve_llama_log.py``
    is not the ``hypnos`` command, so it does not)."""
    from hypnos.cli.malloc_thp import reexec_env, thp_mode
    env = reexec_env(os.environ, platform.libc_ver(), thp_mode())
    return {"GLIBC_TUNABLES": env["GLIBC_TUNABLES"]} if env else {}


class Servers:
    """Hypnos (``serve_llama_log.py`` on the default lineup's block) and llama-server on the
    same GGUF, both running at once; ``stop()`` ends both. Blocks until both answer."""

    def __init__(self, binary: Path, entry, models_dir: Path, threads: int, tmp: Path,
                 others: list = ()):
        self.binary, self.entry, self.threads, self.tmp = binary, entry, threads, tmp
        weights_rel, config = hypnos_config(entry, models_dir, others)
        self.weights = models_dir / weights_rel
        (tmp / "hypnos.toml").write_text(config)
        self.hypnos = self.ref = None
        try:
            self.hypnos = ServerProcess(tmp / "hypnos.toml", tmp / "hypnos.log", env=thp_env(),
                                        launcher=(str(HERE / "serve_llama_log.py"),))
            self._llama_server("llama-server-lv4.log", ("-lv", "4")).stop()  # its flags
            self.ref = self._llama_server("llama-server.log")
        except BaseException:
            self.stop()
            raise
        self.sides = [Side("hypnos", self.hypnos.base, {"model": entry.id, "num_ctx": PER_SLOT},
                           self.hypnos.proc.pid),
                      Side("llama-server", self.ref.base, {}, self.ref.proc.pid)]

    def _llama_server(self, log: str, extra: tuple[str, ...] = ()) -> LlamaServer:
        return LlamaServer(self.binary, self.weights, self.threads, self.tmp / log,
                           context=SLOTS * PER_SLOT, slots=SLOTS, extra=extra)

    def flags(self) -> tuple[dict, dict]:
        """(Hypnos's, llama-server's) settings as each reports them (``server_flags.py``)."""
        return (hypnos_flags(self.hypnos.base, self.hypnos.log_path, self.hypnos.proc.pid,
                             self.entry.id, SLOTS),
                llama_server_flags(self.ref.base, self.tmp / "llama-server-lv4.log",
                                   self.ref.log_path, self.threads, SLOTS,
                                   self.ref.proc.pid))

    def stop(self) -> None:
        for p in (self.hypnos, self.ref):
            if p is not None:
                p.stop()


def run(binary: Path, args) -> None:
    """Both servers at once on the default chat model; flags, then (a), (b), (e), (f)."""
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import LoadSpec
    sizes = [int(x) for x in args.prefill_sizes.split(",") if x.strip()]
    if max(sizes, default=0) > PER_SLOT - 512:
        raise SystemExit(f"--prefill-sizes: at most {PER_SLOT - 512} tokens (a slot holds "
                         f"{PER_SLOT})")
    entry = chat_entry()
    threads = len(os.sched_getaffinity(0))
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-bench-default-"))
    others = lineup_others(entry) if args.lineup else []
    servers = Servers(binary, entry, args.models_dir.resolve(), threads, tmp, others)
    engine = LlamaChatEngine()          # counts tokens only: one thread, a small context
    try:
        engine.load(LoadSpec("tokens", servers.weights, context_len=512, slots=1, threads=1))
        for s in servers.sides:
            chat(s.base, [{"role": "user", "content": "Say hello."}], 8, s.extra)  # answering
        for other in others:            # the lineup's other models answer once, then idle
            chat(servers.hypnos.base, [{"role": "user", "content": "Say hello."}], 8,
                 {"model": other.id})
        head = (f"default chat model {entry.id} ({servers.weights.name}), {threads} CPUs, "
                f"{SLOTS} slots of {PER_SLOT} tokens, {args.tokens} tokens, medians of "
                f"{args.runs} runs, the servers taking turns"
                + (f"; Hypnos also holds {', '.join(e.id for e in others)} (answered once, "
                   "then idle)" if others else ""))
        print(head)
        print_flags(*servers.flags())
        print("hypnos requests carry num_ctx", PER_SLOT, "(its per-slot context, so it "
              "never sizes one from a prompt); llama-server runs",
              " ".join(servers.ref.proc.args[1:]), flush=True)
        measure(servers.sides, Prompts(engine), engine, args.runs, args.tokens, sizes,
                threads)
        flags = servers.flags()         # again: a context rebuilt meanwhile would show
    except BaseException:
        print(f"the servers' logs are kept in {tmp}")
        raise
    finally:
        servers.stop()
        engine.unload()
    shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(head)
    print_flags(*flags)
    report(servers.sides, sizes, args.runs, threads)
    if args.json:
        args.json.write_text(json.dumps({
            "model": entry.id, "threads": threads, "slots": SLOTS, "per_slot": PER_SLOT,
            "runs": args.runs, "tokens": args.tokens, "prefill_sizes": sizes,
            "flags": {name: {k: [f.value, f.source] for k, f in fl.items()}
                      for name, fl in zip(("hypnos", "llama-server"), flags, strict=True)},
            "samples": {s.name: dict(s.samples) for s in servers.sides}}, indent=1))


# --------------------------------------------------------------------------- report

def report(sides: list[Side], sizes: list[int], runs: int, threads: int) -> None:
    hyp, ref = sides

    def rate(title: str, key: str, target: str = ">= 0.97") -> None:
        h, r = hyp.median(key), ref.median(key)
        print(f"{title}: hypnos {h:8.1f}  llama-server {r:8.1f}  hypnos / llama-server = "
              f"{h / r:.2f} (target {target})")

    def ttft(key: str) -> None:
        h, r = hyp.median(key), ref.median(key)
        print(f"    TTFT (client): hypnos {h:8.0f} ms  llama-server {r:8.0f} ms  "
              f"llama-server / hypnos = {r / h:.2f} (target >= 0.97)")

    def tokens(key: str) -> None:
        print(f"    prompt tokens: hypnos {hyp.median(key + '_prompt'):.0f} "
              f"({hyp.median(key + '_cached'):.0f} cached)  llama-server "
              f"{ref.median(key + '_prompt'):.0f} ({ref.median(key + '_cached'):.0f} cached)")

    rate("(a) single-request decode tokens/s (own figures)", "single")
    rate("(b) completion tokens/s, 4 concurrent (wall time)", "aggregate")
    for size in sizes:
        rate(f"(e) prefill {size:,}-token prompt, tokens/s (own figures)", f"idle{size}_rate")
        ttft(f"idle{size}_ttft")
        tokens(f"idle{size}")
        print(f"    threads meanwhile: hypnos's {threads} busiest "
              f"{hyp.median(f'idle{size}_compute_busy'):.1f} % busy, the others "
              f"{hyp.median(f'idle{size}_other_cpu'):.1f} s; llama-server's "
              f"{ref.median(f'idle{size}_compute_busy'):.1f} %, "
              f"{ref.median(f'idle{size}_other_cpu'):.1f} s")
    for size in sizes:
        key = f"busy{size}"
        rate(f"(f) prefill {size:,}-token prompt while 3 slots decode, tokens/s (own figures)",
             f"{key}_rate")
        ttft(f"{key}_ttft")
        tokens(key)
        rate("    the 3 decoders' tokens/s meanwhile", f"{key}_decode", "reference")
        print(f"    decoders that ended before the prompt's first token: hypnos "
              f"{sum(hyp.samples[key + '_ended']):.0f}, llama-server "
              f"{sum(ref.samples[key + '_ended']):.0f} (of {len(DECODERS) * runs})")
