"""``speculative.py --fresh``: may ``speculative = "auto"`` become the default? (issue #39)

On the default chat model (the catalog's ``qwen2.5-coder:0.5b``, Q4_K_M), every CPU the
process may use (``--threads N``: the first N), one slot, greedy, ``--tokens`` (400) at most,
on the fresh prompt set (``speculative_fresh_prompts``: plain and copying prompts, tune and
held halves). Servers, all running at once and taking turns prompt by prompt (a load change
then falls on all of them):

  default       Hypnos, no ``speculative`` key: the server's default, whatever it is today
  off           Hypnos, ``speculative = "off"``
  auto          Hypnos, ``speculative = "auto"``
  llama-server  llama.cpp's server without speculation, a reference (``--no-llama-server``
                leaves it out)

A run is one session: every prompt asked once, in an order shuffled by the run's number (the
same for every server), each Hypnos server under the run's own API key, so each run starts
with nothing learnt (a key is a partition: its own cached prefixes, answers to draft from
and ``auto`` figures) and learns over the session as a user's key would; llama-server's one
slot holds the previous prompt, so it reuses no more than the chat template's start. An
``again`` prompt is asked twice in a row in its session, the first ask not measured.

Per prompt and server, the median over ``--runs`` (3) of the completion tokens per second
of wall time (the client's: first byte sent to last byte received) and of the server's own
decode rate; the ratios default / off and auto / off of both; the drafts accepted; then the
geometric means of the ratios per kind and family, tune and held apart, with the issue's
verdicts (``speculative_fresh_report.TARGETS``). ``--only`` takes prompt names, kinds,
families or halves (comma-separated); ``--json PATH`` writes everything.

    python bench/speculative.py --fresh [--threads N] [--tokens 400] [--runs 3]
                                [--only edit,plan/app-release] [--no-llama-server]
                                [--json PATH]
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import httpx

from hypnos.bench.harness import ServerProcess
from hypnos.bench.llama_server import LlamaServer, llama_server_binary
from hypnos.bench.speculative_fresh_prompts import PROMPTS, FreshPrompt
from hypnos.bench.speculative_fresh_report import (PAIRS, TARGETS, Ask, PromptResult, ask_of,
                                                   print_summary, print_table, summarize)

#: The catalog's default chat model: (id, weights under the models folder).
CHAT = ("qwen2.5-coder:0.5b", "qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
CONTEXT = 4096
#: Hypnos configs: name -> the model's ``speculative`` value as TOML (None: no key).
CONFIGS: dict[str, str | None] = {"default": None, "off": '"off"', "auto": '"auto"'}
REFERENCE = "llama-server"
WARM_KEY = "bench-fresh-warm"
DEFAULT_TOKENS, DEFAULT_RUNS = 400, 3


def session_key(run: int) -> str:
    """The API key of run ``run``'s session (a Hypnos partition of its own)."""
    return f"bench-fresh-session-{run}"


def session_order(prompts: list[FreshPrompt], run: int) -> list[FreshPrompt]:
    """The prompts in run ``run``'s order: shuffled by the run's number, so every run (and
    every rerun of the bench) asks them in its own fixed order."""
    order = list(prompts)
    random.Random(run).shuffle(order)
    return order


def select(prompts: list[FreshPrompt], only: list[str] | None) -> list[FreshPrompt]:
    """The prompts ``only`` names (each a prompt's name, kind, family or half); all without
    it. A word that names nothing is refused."""
    if not only:
        return list(prompts)
    fields = lambda p: (p.name, p.kind, p.family, p.half)  # noqa: E731
    unknown = [w for w in only if not any(w in fields(p) for p in prompts)]
    if unknown:
        raise ValueError(f"--only: no prompt, kind, family or half named {unknown}")
    return [p for p in prompts if any(w in fields(p) for w in only)]


def hypnos_config(path: Path, models_dir: Path, speculative: str | None, runs: int) -> Path:
    """A config serving the chat model in one slot with ``speculative`` (None: no key), and
    one admin key per run's session plus the warm-up's."""
    keys = ", ".join(f'"{k}"' for k in [*map(session_key, range(runs)), WARM_KEY])
    text = (f'models_dir = "{models_dir}"\n\n[server]\napi_keys = [{keys}]\n\n'
            f'[[models]]\nid = "{CHAT[0]}"\nmodality = "text_generation"\n'
            f'engine = "ggml_llama"\nweights_path = "{CHAT[1]}"\nslots = 1\n'
            f'context_len = {CONTEXT}\n')
    if speculative is not None:
        text += f"speculative = {speculative}\n"
    path.write_text(text)
    return path


class Server:
    """One server under test. ``ask`` blocks until the whole answer is in; ``keyed``: the
    session's key goes with each request (Hypnos's partition per session)."""

    def __init__(self, name: str, base: str, settings: str, extra: dict | None = None,
                 keyed: bool = False):
        self.name, self.settings, self.extra, self.keyed = name, settings, extra or {}, keyed
        self.client = httpx.Client(base_url=base, timeout=1800)

    def ask(self, text: str, tokens: int, session: str) -> Ask:
        body = {"model": CHAT[0], "messages": [{"role": "user", "content": text}],
                "max_tokens": tokens, "temperature": 0, "seed": 1, **self.extra}
        headers = {"Authorization": f"Bearer {session}"} if self.keyed else {}
        t0 = time.perf_counter()
        r = self.client.post("/v1/chat/completions", json=body, headers=headers)
        wall_s = time.perf_counter() - t0
        if r.status_code != 200:
            raise RuntimeError(f"{self.name}: HTTP {r.status_code}: {r.text[:300]}")
        return ask_of(r.json(), wall_s)


@contextlib.contextmanager
def servers(models_dir: Path, threads: int, runs: int, reference: bool, tmp: Path,
            configs: list[str] | None = None):
    """The Hypnos servers of ``CONFIGS`` and llama-server (``reference``), all started;
    stopped on exit. Prints each one's settings (flags)."""
    with contextlib.ExitStack() as stack:
        out = []
        for name, speculative in CONFIGS.items():
            if configs is not None and name not in configs:
                continue
            cfg = hypnos_config(tmp / f"hypnos-{name}.toml", models_dir, speculative, runs)
            srv = ServerProcess(cfg, tmp / f"hypnos-{name}.log", ready_timeout=300)
            stack.callback(srv.stop)
            settings = (f"hypnos serve: speculative = {speculative or '(unset)'}, slots 1, "
                        f"context {CONTEXT}, threads: every CPU ({threads}), num_ctx "
                        f"{CONTEXT} per request, an API key per session")
            out.append(Server(name, srv.base, settings, {"num_ctx": CONTEXT}, keyed=True))
        if reference:
            ref = LlamaServer(llama_server_binary(), models_dir / CHAT[1], threads,
                              tmp / "llama-server.log", context=CONTEXT, slots=1)
            stack.callback(ref.stop)
            out.append(Server(REFERENCE, ref.base, "llama-server " + " ".join(
                str(a) for a in ref.proc.args[1:])))
        for t in out:
            print(f"  {t.name:12} {t.settings}", flush=True)
        yield out


def measure(targets: list[Server], prompts: list[FreshPrompt], runs: int,
            tokens: int) -> list[PromptResult]:
    """Every prompt once a run, the servers taking turns; one progress line per prompt."""
    results = {p.name: PromptResult(p) for p in prompts}
    for t in targets:
        t.ask("Say hi.", 8, WARM_KEY)
    for run in range(runs):
        key = session_key(run)
        for p in session_order(prompts, run):
            line = []
            for t in targets:
                if p.kind == "again":
                    t.ask(p.ask, tokens, key)             # the first ask: not measured
                a = t.ask(p.ask, tokens, key)
                results[p.name].asks.setdefault(t.name, []).append(a)
                line.append(f"{t.name} {a.rate:5.1f} ({a.tokens})")
            print(f"  run {run + 1}/{runs} {p.name:30} {'  '.join(line)}", flush=True)
    return [results[p.name] for p in prompts]


def methods_seen(results: list[PromptResult]) -> dict[str, list[str]]:
    """config -> the speculation methods its servers reported (none: it did not draft)."""
    seen: dict[str, set[str]] = {}
    for r in results:
        for config, asks in r.asks.items():
            seen.setdefault(config, set()).update(a.method for a in asks if a.method)
    return {c: sorted(m) for c, m in seen.items()}


def main(args) -> None:
    """Run the fresh bench with speculative.py's parsed ``args`` (``fresh`` set)."""
    if args.threads:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    threads = len(os.sched_getaffinity(0))
    tokens, runs = args.tokens or DEFAULT_TOKENS, args.runs or DEFAULT_RUNS
    prompts = select(PROMPTS, args.only)
    print(f"fresh prompt set: {len(prompts)} prompts; model {CHAT[1]}, {threads} threads, "
          f"one slot, greedy, {tokens} tokens at most, median of {runs} runs", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-spec-fresh-"))
    unknown = set(args.configs or ()) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"unknown configs {sorted(unknown)} (known: {', '.join(CONFIGS)})")
    with servers(args.models_dir, threads, runs, not args.no_llama_server, tmp,
                 args.configs) as targets:
        results = measure(targets, prompts, runs, tokens)
    configs = [t.name for t in targets]
    settings = {t.name: t.settings for t in targets}
    print_table(results, configs)
    figures = summarize(results)
    print_summary(figures)
    methods = methods_seen(results)
    print("\ndrafting methods reported: " + ", ".join(
        f"{c} {'/'.join(m) or 'none'}" for c, m in methods.items()))
    if args.json:
        args.json.write_text(json.dumps({
            "model": CHAT[1], "threads": threads, "tokens": tokens, "runs": runs,
            "context": CONTEXT, "servers": settings,
            "targets": TARGETS, "pairs": [f"{a}/{b}" for a, b in PAIRS],
            "methods": methods, "prompts": [r.to_json() for r in results],
            "summary": [asdict(f) for f in figures]}, indent=1))
