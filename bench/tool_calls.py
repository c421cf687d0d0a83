"""Tool-calling quality: Hypnos against llama-server (`--jinja`) on the same GGUFs.

The 50 fixed cases of `tool_cases.json` (single tool, choice among 2-4 tools, several
arguments, nested objects / arrays / enums, and no tool needed) go through the
OpenAI-compatible `/v1/chat/completions` of `hypnos serve` (a config naming the model) and of
`llama-server --jinja -m <gguf>`, both on the same threads (the run is pinned to them), one
slot of the same context, temperature 0, a fixed seed and `max_tokens` 128, once with
`tool_choice: "auto"` and once with `"required"` (the no-tool cases are skipped there). Each
(server, model, tool_choice) row prints, over the cases expecting a call: valid calls (JSON
arguments the tool's schema admits), right tool, right arguments (`tool_scoring.py`'s
predicates); over the no-tool cases: answered without a tool. Then Hypnos / llama-server per
column.

    python bench/tool_calls.py [--models 0.5b,1.5b] [--servers hypnos,llama-server]
                               [--choices auto,required] [--limit N] [--skip N]
                               [--threads 2] [--json PATH]
    python bench/tool_calls.py --rescore PATH [PATH ...]

llama-server is built and cached as `llama_server.py` builds it (first run: ~20 minutes).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import httpx

from hypnos.bench.harness import ROOT, ServerProcess
from hypnos.bench.llama_server import LlamaServer, llama_server_binary
from hypnos.engines.llama.cpu import extra_buffers_ok
from hypnos.bench.tool_scoring import (COLUMNS, TEXT_CALL, Case, Outcome, answer_of, load_cases,
                                       rates, ratio, score)

#: --models key -> (catalog id, GGUF under the models folder).
MODELS = {
    "0.5b": ("qwen2.5-coder:0.5b", "qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    "1.5b": ("qwen2.5-coder:1.5b", "qwen2.5-coder-1.5b/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
}
SERVERS = ("hypnos", "llama-server")
CHOICES = ("auto", "required")
CONTEXT = 4096
MAX_TOKENS = 128
SEED = 42


class Target:
    """One running server: where to send, the model name, and fields besides OpenAI's."""

    def __init__(self, name: str, base: str, model: str, extra: dict | None = None):
        self.name, self.base, self.model, self.extra = name, base, model, extra or {}

    def ask(self, case: Case, choice: str) -> tuple[dict | None, str | None, float]:
        """(the decoded answer or None, the error, seconds). Never raises for a refused or
        failed request: the error is scored as no answer."""
        body = {"model": self.model, "messages": [{"role": "user", "content": case.user}],
                "tools": case.tools, "tool_choice": choice, "temperature": 0, "seed": SEED,
                "max_tokens": MAX_TOKENS, **self.extra}
        t0 = time.perf_counter()
        try:
            r = httpx.post(self.base + "/v1/chat/completions", json=body, timeout=600)
        except httpx.HTTPError as e:
            return None, f"{type(e).__name__}: {e}", time.perf_counter() - t0
        elapsed = time.perf_counter() - t0
        if r.status_code != 200:
            return None, f"HTTP {r.status_code}: {r.text[:300]}", elapsed
        return r.json(), None, elapsed

    def warm(self) -> None:
        """One short request, so the first case does not pay the model's load."""
        httpx.post(self.base + "/v1/chat/completions", timeout=600, json={
            "model": self.model, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 1, "temperature": 0, **self.extra}).raise_for_status()


@contextlib.contextmanager
def servers_for(key: str, names: list[str], models_dir: Path, threads: int, tmp: Path):
    """The servers asked for, all on model ``key``, yielded as Targets; stopped on exit."""
    model_id, gguf = MODELS[key]
    with contextlib.ExitStack() as stack:
        targets = []
        for name in names:
            if name == "hypnos":
                cfg = tmp / f"hypnos-{key}.toml"
                cfg.write_text(f'models_dir = "{models_dir}"\n[[models]]\nid = "{model_id}"\n'
                               f'modality = "text_generation"\nengine = "ggml_llama"\n'
                               f'weights_path = "{gguf}"\nslots = 1\n'
                               f'context_len = {CONTEXT}\n')
                srv = ServerProcess(cfg, tmp / f"hypnos-{key}.log")
                targets.append(Target(name, srv.base, model_id, {"num_ctx": CONTEXT}))
            else:
                # Where Hypnos keeps weights out of llama.cpp's extra buffer types (an AMX
                # host: this llama.cpp's AMX matmul dies with SIGSEGV), llama-server does too.
                same = () if extra_buffers_ok() else ("--no-repack",)
                srv = LlamaServer(llama_server_binary(), models_dir / gguf, threads,
                                  tmp / f"llama-server-{key}.log", context=CONTEXT, slots=1,
                                  extra=("--jinja", *same))
                targets.append(Target(name, srv.base, model_id))
            stack.callback(srv.stop)
        for t in targets:
            t.warm()
        yield targets


Row = tuple[str, str, str]          # (server, model key, tool_choice)


def run_model(targets: list[Target], key: str, choices: list[str], cases: list[Case],
              results: dict[Row, list[tuple[Outcome, float]]], save) -> None:
    """Every case under every choice on every target, the targets taking turns case by case;
    a line on stderr per case, ``save()`` after each, one line on stdout per row as it ends."""
    for choice in choices:
        todo = [c for c in cases if choice != "required" or c.expect is not None]
        for i, case in enumerate(todo, 1):
            for t in targets:
                response, error, seconds = t.ask(case, choice)
                outcome = score(case, response, error)
                results.setdefault((t.name, key, choice), []).append((outcome, seconds))
                print(f"[{key} {choice} {i}/{len(todo)}] {t.name} {case.id}: "
                      f"{outcome.problem or 'ok'} ({seconds:.1f} s)", file=sys.stderr,
                      flush=True)
            save()
        for t in targets:
            print_row((t.name, key, choice), results[(t.name, key, choice)], flush=True)


def print_row(row: Row, done: list[tuple[Outcome, float]], flush: bool = False) -> None:
    figures = rates([o for o, _ in done])     # COLUMNS, then TEXT_CALL
    cells = "".join(f"  {hits:>3}/{of:<3} {100 * hits / of:5.1f} %" if of else
                    f"  {'-':>15}" for hits, of in figures.values())
    median = statistics.median(s for _, s in done)
    print(f"{row[0]:<13}{row[1]:<6}{row[2]:<10}{cells}  {median:6.2f} s", flush=flush)


def report(results: dict[Row, list[tuple[Outcome, float]]]) -> None:
    """The table (one line per row, every column hits/cases and %) and the ratios."""
    header = "".join(f"  {title:>15}" for _, title in (*COLUMNS, TEXT_CALL))
    print(f"\n{'server':<13}{'model':<6}{'choice':<10}{header}  {'median':>8}")
    for row in sorted(results, key=lambda r: (r[1], r[2], SERVERS.index(r[0]))):
        print_row(row, results[row])
    for (server, key, choice), done in sorted(results.items()):
        other = results.get(("llama-server", key, choice))
        if server != "hypnos" or other is None:
            continue
        ours, theirs = rates([o for o, _ in done]), rates([o for o, _ in other])
        cells = "  ".join(f"{title} {ratio(ours[k], theirs[k])}" for k, title in COLUMNS)
        print(f"hypnos / llama-server  {key:<5} {choice:<9} {cells}")


def dump(path: Path, results: dict[Row, list[tuple[Outcome, float]]]) -> None:
    records = [{"server": s, "model": k, "choice": c, "seconds": round(sec, 3), **asdict(o)}
               for (s, k, c), done in results.items() for o, sec in done]
    path.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")


def rescored(paths: list[Path], cases: list[Case]) -> dict[Row, list[tuple[Outcome, float]]]:
    """Saved runs (``--json``, e.g. one per model or per range of cases) scored again with
    this scoring, answers as recorded."""
    by_id = {c.id: c for c in cases}
    results: dict[Row, list[tuple[Outcome, float]]] = {}
    for r in (r for path in paths for r in json.loads(path.read_text())):
        outcome = score(by_id[r["case"]], *answer_of(r))
        results.setdefault((r["server"], r["model"], r["choice"]), []).append(
            (outcome, r["seconds"]))
    return results


def listed(allowed: tuple[str, ...] | dict):
    """An argparse type: a comma-separated list of names among ``allowed``."""
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"choose among {', '.join(allowed)}")
        return names
    return parse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=listed(MODELS), default=list(MODELS))
    ap.add_argument("--servers", type=listed(SERVERS), default=list(SERVERS))
    ap.add_argument("--choices", type=listed(CHOICES), default=list(CHOICES))
    ap.add_argument("--limit", type=int, default=None, help="only the first N cases")
    ap.add_argument("--skip", type=int, default=0, help="start after the first N cases")
    ap.add_argument("--threads", type=int, default=2,
                    help="pin the run to the first N CPUs; both servers run N threads")
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("HYPNOS_MODELS_DIR", ROOT / "models")))
    ap.add_argument("--json", type=Path, default=None,
                    help="write every outcome here (rewritten after each case)")
    ap.add_argument("--rescore", type=Path, nargs="+", default=None, metavar="PATH",
                    help="run nothing: print the table of saved --json runs, scored again")
    args = ap.parse_args()
    if args.rescore:
        report(rescored(args.rescore, load_cases()))
        return
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    threads = len(os.sched_getaffinity(0))
    cases = load_cases()[args.skip:][:args.limit]
    if "llama-server" in args.servers:
        llama_server_binary()                 # build (once) before any server starts
    print(f"{len(cases)} cases, {threads} threads, context {CONTEXT}, 1 slot, temperature 0, "
          f"seed {SEED}, max_tokens {MAX_TOKENS}", flush=True)
    t0 = time.perf_counter()
    results: dict[Row, list[tuple[Outcome, float]]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-tool-calls-"))

    def save() -> None:
        if args.json:
            dump(args.json, results)

    for key in args.models:
        with servers_for(key, args.servers, args.models_dir, threads, tmp) as targets:
            run_model(targets, key, args.choices, cases, results, save)
    report(results)
    print(f"wall time {time.perf_counter() - t0:.0f} s; server logs in {tmp}")


if __name__ == "__main__":
    main()
