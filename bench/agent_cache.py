"""An agent's prefix, prefilled once? Hypnos against llama.cpp's ``llama-server``, step by step.

An agent sends the same long prefix (a system prompt and tool schemas) on every turn, every
new session and every subagent. This bench drives an agent-shaped conversation through both
servers on the same GGUF, one server at a time (a fresh process and a fresh state folder for
each run, the servers taking turns run by run, so load on a shared machine falls on both),
and prints, for each step, the tokens each server reported as reused and the prefill time it
reported, with the share of the reusable prefix that was reused and the Hypnos /
llama-server prefill ratio (medians of ``--runs``):

  turn2      the same conversation's next turn
  second     a new conversation with the same system prompt and tools
  after-K    the first conversation's next turn after K other conversations (other prefixes)
             used every slot
  swap       its next turn after the model was moved out of memory and back (Hypnos only:
             llama-server serves one model and has no swap; printed as "-")
  restart    its next turn after both servers were restarted (Hypnos keeps its state folder)

"reusable" is the longest token prefix the step's prompt shares with any prompt sent
before it in that run, counted as each server renders it: Hypnos's by its own engine loaded
in this process (``render_prompt``), llama-server's by a llama-server (``/apply-template``,
``/tokenize``). The two render tools differently, so their prompts differ in length.

    python bench/agent_cache.py [--runs 3] [--prefix-words 2000] [--tools 14] [--others 3]
                                [--hybrid] [--threads N]

``--hybrid`` runs the same steps on a generated random-weight Qwen3.5-architecture GGUF
(recurrent and attention layers: ``tests/tiny_qwen35.py``), where reuse past a divergence
needs checkpoints of the recurrent state; what is reused does not depend on the weights.
llama-server is built once from the llama.cpp inside the llama-cpp-python sdist Hypnos runs
(``bench/llama_server.py``), ``--parallel 2`` with its defaults for ``--cache-ram`` and
context checkpoints. Targets (issue 36): every step >= 95 % of the reusable prefix reused on
a plain model, >= 90 % on a hybrid one, >= 90 % after a restart, and Hypnos's prefill time
<= 1.05x llama-server's on every step.
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
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402
from llama_server import LlamaServer, llama_server_binary  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from tiny_llama import SMOLLM2  # noqa: E402

SLOTS = 2
CONTEXT = 16384            # 8,192 tokens a slot on both servers: no prompt here needs more
ANSWER_TOKENS = 16
STEPS = ("turn2", "second", "after-K", "swap", "restart")
WORDS = ("river stone lantern harbour violet engine quiet market orchard signal copper meadow "
         "ladder winter canvas thunder pocket garden silver mirror").split()


# --------------------------------------------------------------------------- the agent


def words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def tools(count: int) -> list[dict]:
    """``count`` function schemas shaped like an agent CLI's (a description and a few typed
    parameters each)."""
    out = []
    for i in range(count):
        out.append({"type": "function", "function": {
            "name": f"tool_{i}",
            "description": f"Tool {i}: " + words(1000 + i, 60),
            "parameters": {"type": "object", "properties": {
                "path": {"type": "string", "description": words(2000 + i, 12)},
                "limit": {"type": "integer", "description": words(3000 + i, 8)},
                "recursive": {"type": "boolean"}}, "required": ["path"]}}})
    return out


class Agent:
    """The agent's prefix (system prompt + tools) and its conversations."""

    def __init__(self, prefix_words: int, n_tools: int):
        self.system = "You are a coding agent. " + words(7, prefix_words)
        self.tools = tools(n_tools)

    def body(self, messages: list[dict], system: str | None = None) -> dict:
        return {"model": "chat", "max_tokens": ANSWER_TOKENS, "temperature": 0,
                "messages": [{"role": "system", "content": system or self.system}, *messages],
                "tools": self.tools}


# --------------------------------------------------------------------------- servers


class Side:
    """One server kind: how to start it fresh, how it renders a chat body into tokens, and
    what it reported for each step."""

    def __init__(self, name: str, start, tokens=None):
        self.name = name
        self.start = start            # (run_dir, restart: bool) -> process with .base, .stop
        self.tokens = tokens          # chat body -> prompt tokens, as this server renders it
        # Per step, per run: (reused, prefill ms, reusable, prompt tokens).
        self.steps: dict[str, list[tuple[int, float, int, int]]] = {s: [] for s in STEPS}


def hypnos_side(weights: Path) -> Side:
    """``hypnos serve`` on ``weights``; its engine runs a thread per CPU this process may
    use, as llama-server is told to."""
    def start(run_dir: Path, restart: bool):
        cfg = run_dir / "hypnos.toml"
        cfg.write_text(f'models_dir = "{weights.parent}"\n'
                       f'[server]\nstate_dir = "{run_dir / "state"}"\n'
                       f'[[models]]\nid = "chat"\nmodality = "text_generation"\n'
                       f'engine = "ggml_llama"\nweights_path = "{weights.name}"\n'
                       f'slots = {SLOTS}\ncontext_len = {CONTEXT}\n')
        return ServerProcess(cfg, run_dir / f"hypnos{'-2' if restart else ''}.log")
    return Side("hypnos", start)


def llama_side(binary: Path, weights: Path, threads: int) -> Side:
    def start(run_dir: Path, restart: bool):
        return LlamaServer(binary, weights, threads,
                           run_dir / f"llama-server{'-2' if restart else ''}.log",
                           context=CONTEXT, slots=SLOTS, extra=("--jinja",))
    return Side("llama-server", start)


def reported(reply: dict) -> tuple[int, float, int]:
    """(tokens reused, prefill ms, prompt tokens) as the server reported them."""
    if "hypnos_telemetry" in reply:
        usage = reply["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return cached, reply["hypnos_telemetry"]["engine"]["prefill_ms"], usage["prompt_tokens"]
    t = reply["timings"]
    return t["cache_n"], t["prompt_ms"], t["cache_n"] + t["prompt_n"]


def chat(base: str, body: dict) -> dict:
    r = httpx.post(base + "/v1/chat/completions", json=body, timeout=1800)
    if r.status_code != 200:
        raise RuntimeError(f"{base}: {r.status_code} {r.text[:500]}")
    return r.json()


class EngineTokens:
    """Prompt tokens of a chat body as Hypnos renders it: its engine, in this process."""

    def __init__(self, engine):
        self.engine = engine

    def __call__(self, body: dict) -> list[int]:
        return self.engine.render_prompt(body["messages"], body.get("tools"))


class Tokens:
    """Prompt tokens of a chat body, rendered and counted by a llama-server."""

    def __init__(self, base: str):
        self.base = base

    def __call__(self, body: dict) -> list[int]:
        r = httpx.post(self.base + "/apply-template", json=body, timeout=60)
        r.raise_for_status()
        r = httpx.post(self.base + "/tokenize", json={
            "content": r.json()["prompt"], "add_special": True, "parse_special": True},
            timeout=60)
        r.raise_for_status()
        return r.json()["tokens"]


def common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# --------------------------------------------------------------------------- one run


def run_once(side: Side, agent: Agent, run_dir: Path, others: int) -> None:
    """The steps on a fresh server of ``side``, recording (reused, prefill ms, reusable) for
    each on ``side``. A step's reusable prefix is counted on this run's own prompts (the
    answers, which later turns carry, may differ between servers)."""
    sent: list[list[int]] = []

    def step(base: str, name: str | None, body: dict, record: bool = True) -> dict:
        reply = chat(base, body)
        toks = side.tokens(body)
        if name is not None and record:
            cached, ms, prompt = reported(reply)
            side.steps[name].append((cached, ms, max((common(toks, s) for s in sent),
                                                     default=0), prompt))
        sent.append(toks)
        return reply

    def turn(history: list[dict], reply: dict, ask: str) -> list[dict]:
        answer = reply["choices"][0]["message"].get("content") or ""
        return [*history, {"role": "assistant", "content": answer},
                {"role": "user", "content": ask}]

    proc = side.start(run_dir, False)
    try:
        a = [{"role": "user", "content": "List the files under src."}]
        reply = step(proc.base, None, agent.body(a))
        a = turn(a, reply, "Now open the first one.")
        reply = step(proc.base, "turn2", agent.body(a))
        step(proc.base, "second", agent.body([{"role": "user", "content": "Run the tests."}]))
        for k in range(others):
            step(proc.base, None, agent.body(
                [{"role": "user", "content": f"Question {k}."}],
                system=f"Other agent {k}. " + words(100 + k, len(agent.system.split()))))
        a = turn(a, reply, "Summarise it.")
        reply = step(proc.base, "after-K", agent.body(a))
        # llama-server has no swap: it answers the same turn unmoved, unrecorded, so that
        # both servers' conversations stay alike for the restart step.
        swaps = side.name == "hypnos"
        if swaps:
            r = httpx.post(proc.base + "/v1/memory/tier", json={
                "model": "chat", "target_tier": "tier3_nvme_ssd"}, timeout=600)
            r.raise_for_status()
        a = turn(a, reply, "And the second file?")
        reply = step(proc.base, "swap", agent.body(a), record=swaps)
    finally:
        proc.stop()
    proc = side.start(run_dir, True)
    try:
        a = turn(a, reply, "Which tool fits best?")
        step(proc.base, "restart", agent.body(a))
    finally:
        proc.stop()


# --------------------------------------------------------------------------- report


def report(sides: list[Side], model: str, runs: int, target: float) -> None:
    print(f"model {model}, {SLOTS} slots, context {CONTEXT}, median of {runs} runs; "
          f"target: >= {target:.0%} of the reusable prefix reused, prefill <= 1.05x")
    print("reusable: the longest prefix shared with an earlier prompt of the run (the answer "
          "a slot also holds can add a few tokens: a share above 100 %)")
    print(f"{'step':9} | {'hypnos reused / reusable of prompt':>36} {'ms':>7} | "
          f"{'llama-server reused / reusable of prompt':>42} {'ms':>7} | ratio")
    for name in STEPS:
        line, ms = f"{name:9} |", []
        for side, width in zip(sides, (36, 42), strict=True):
            rows = side.steps[name]
            if not rows:
                line += f" {'-':>{width}} {'-':>7} |"
                ms.append(None)
                continue
            cached = statistics.median(r[0] for r in rows)
            share = statistics.median(r[0] / max(r[2], 1) for r in rows)
            reusable = statistics.median(r[2] for r in rows)
            prompt = statistics.median(r[3] for r in rows)
            ms.append(statistics.median(r[1] for r in rows))
            cell = f"{cached:.0f} / {reusable:.0f} of {prompt:.0f} ({share:.0%})"
            line += f" {cell:>{width}} {ms[-1]:7.0f} |"
        if ms[0] is not None and ms[1]:
            line += f" {ms[0] / ms[1]:.2f}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefix-words", type=int, default=2000,
                    help="words of filler in the system prompt (about 1.3 tokens each)")
    ap.add_argument("--tools", type=int, default=14)
    ap.add_argument("--others", type=int, default=3)
    ap.add_argument("--hybrid", action="store_true",
                    help="a generated tiny Qwen3.5-architecture GGUF (tests/tiny_qwen35.py)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    threads = len(os.sched_getaffinity(0))
    binary = llama_server_binary()
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-agent-cache-"))
    try:
        if args.hybrid:
            from tiny_qwen35 import write_tiny_qwen35
            weights = tmp / "models" / "tiny-qwen35.gguf"
            weights.parent.mkdir()
            write_tiny_qwen35(weights)
            target = 0.90
        else:
            weights = args.models_dir / SMOLLM2
            target = 0.95
        agent = Agent(args.prefix_words, args.tools)
        sides = [hypnos_side(weights), llama_side(binary, weights, threads)]
        from hypnos.engines.llama.engine import LlamaChatEngine
        from hypnos.engines.records import LoadSpec
        counter = LlamaServer(binary, weights, 1, tmp / "tokens.log", context=CONTEXT,
                              slots=1, extra=("--jinja",))
        engine = LlamaChatEngine()
        engine.load(LoadSpec("count", weights, context_len=CONTEXT, slots=1, threads=1))
        try:
            sides[0].tokens = EngineTokens(engine)
            sides[1].tokens = Tokens(counter.base)
            for run in range(args.runs):
                order = sides if run % 2 == 0 else sides[::-1]
                for side in order:
                    run_dir = tmp / f"{side.name}-{run}"
                    run_dir.mkdir()
                    run_once(side, agent, run_dir, args.others)
                    print(f"run {run + 1} {side.name}: " + json.dumps(
                        {k: v[-1] for k, v in side.steps.items() if v}), flush=True)
        finally:
            counter.stop()
            engine.unload()
        report(sides, weights.name, args.runs, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
