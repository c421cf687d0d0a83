"""Speculative decoding: Hypnos against llama-server, method by method, on the same GGUFs.

Target Qwen2.5-Coder-1.5B-Instruct Q4_K_M, draft Qwen2.5-Coder-0.5B-Instruct Q4_K_M, greedy,
``--tokens`` (160) tokens, the best of ``--runs`` (2) per prompt, the run pinned to
``--threads`` (2) CPUs, one slot. Prompt sets:

  code   "return this code with one function renamed" and a ~40-line code block (3 prompts)
  story  free text: a short story (2 prompts)
  edit   "return this file with one line changed" (3 prompts); Hypnos sends the file as the
         OpenAI Predicted Outputs ``prediction``

Methods. llama-server: ``none``, ``draft`` (``-md <0.5B> --spec-type draft-simple``),
``draft+ngram`` (``-md <0.5B> --spec-type ngram-mod,draft-simple``) and ``ngram``
(``--spec-type ngram-mod``). Hypnos, by the per-model config key ``speculative``: ``off``,
``ngram``, ``draft`` (``{draft = "qwen2.5-coder:0.5b", n_max = 4, lookup = false}``: the draft
model alone), ``draft+ngram`` (the same without ``lookup = false``, Hypnos's default for a
draft model: prompt lookup first, the draft model where nothing is being copied) and ``auto``;
``prediction`` is Hypnos ``off`` with the request's ``prediction`` field. A method a server
refuses (a config it will not start with, a 400, a prediction it ignores) prints "not
available". Each method's two servers run at once and take turns prompt by prompt.

Prints tokens/s (the servers' own decode rates: Hypnos ``hypnos_telemetry.engine``,
llama-server ``timings.predicted_per_second``), drafts accepted where reported (llama-server
``timings.draft_n_accepted`` of ``draft_n``; Hypnos ``hypnos_telemetry.speculative`` or
``usage.completion_tokens_details``), and the ratios Hypnos / llama-server per method,
Hypnos method / Hypnos off, auto / off.

    python bench/speculative.py [--threads 2] [--tokens 160] [--runs 2] [--sets code,story,edit]
                                [--methods none,draft,draft+ngram,ngram,auto,prediction]
                                [--json PATH]

``--fresh`` runs ``speculative_fresh.py`` instead: issue #39's fresh prompt set on the
default chat model, Hypnos's default against ``off`` and ``auto`` (see that module).

llama-server is built and cached as ``llama_server.py`` builds it (first run: ~20 minutes).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402
from llama_server import LlamaServer, llama_server_binary  # noqa: E402
from speculative_prompts import SETS  # noqa: E402

from hypnos.engines.llama.cpu import extra_buffers_ok  # noqa: E402

TARGET = ("qwen2.5-coder:1.5b", "qwen2.5-coder-1.5b/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
DRAFT = ("qwen2.5-coder:0.5b", "qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
CONTEXT = 4096
#: method -> (llama-server arguments or None when it has no such method, Hypnos's
#: ``speculative`` value as TOML or None for the request-side ``prediction``).
METHODS: dict[str, tuple[tuple[str, ...] | None, str | None]] = {
    "none": ((), '"off"'),
    "draft": (("-md", "{draft}", "--spec-type", "draft-simple"),
              f'{{ draft = "{DRAFT[0]}", n_max = 4, lookup = false }}'),
    "draft+ngram": (("-md", "{draft}", "--spec-type", "ngram-mod,draft-simple"),
                    f'{{ draft = "{DRAFT[0]}", n_max = 4 }}'),
    "ngram": (("--spec-type", "ngram-mod"), '"ngram"'),
    "auto": (None, '"auto"'),
    "prediction": (None, None),
}
NOT_AVAILABLE = "not available"


class Refused(Exception):
    """The server does not serve this method (the reason is the message)."""


class Target:
    """One server, one method: the best decode rate per prompt and the drafts reported, by
    prompt set."""

    def __init__(self, name: str, base: str, model: str, extra: dict | None = None,
                 predicted: bool = False):
        self.name, self.base, self.model, self.extra = name, base, model, extra or {}
        self.predicted = predicted
        self.best: dict[tuple[str, int], float] = {}
        self.drafted: dict[str, int] = {}
        self.accepted: dict[str, int] = {}
        self.refused: str | None = None

    def ask(self, key: tuple[str, int], prompt: dict, tokens: int) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt["ask"]}],
                "max_tokens": tokens, "temperature": 0, "seed": 1, **self.extra}
        if self.predicted:
            body["prediction"] = {"type": "content", "content": prompt["prediction"]}
        r = httpx.post(self.base + "/v1/chat/completions", json=body, timeout=1800)
        if r.status_code == 400:
            raise Refused(f"400: {r.text[:200]}")
        r.raise_for_status()
        reply = r.json()
        drafted, accepted = drafts_of(reply, self.predicted)
        self.best[key] = max(self.best.get(key, 0.0), decode_rate(reply))
        self.drafted[key[0]] = self.drafted.get(key[0], 0) + drafted
        self.accepted[key[0]] = self.accepted.get(key[0], 0) + accepted

    def rate(self, set_name: str) -> float | None:
        """The mean over the set's prompts of each one's best tokens/s."""
        rates = [r for (s, _), r in self.best.items() if s == set_name]
        return statistics.mean(rates) if rates and not self.refused else None


def decode_rate(reply: dict) -> float:
    if "hypnos_telemetry" in reply:
        return reply["hypnos_telemetry"]["engine"]["decode_tokens_per_s"]
    return reply["timings"]["predicted_per_second"]


def drafts_of(reply: dict, predicted: bool) -> tuple[int, int]:
    """(drafted, accepted) tokens as the server reports them; a prediction the server
    ignored (no prediction counts in usage) is refused."""
    if "timings" in reply:
        t = reply["timings"]
        return t.get("draft_n", 0), t.get("draft_n_accepted", 0)
    details = reply.get("usage", {}).get("completion_tokens_details") or {}
    if predicted:
        if "accepted_prediction_tokens" not in details:
            raise Refused("the prediction was ignored (no accepted_prediction_tokens)")
        accepted = details["accepted_prediction_tokens"]
        return accepted + details.get("rejected_prediction_tokens", 0), accepted
    spec = reply.get("hypnos_telemetry", {}).get("speculative") or {}
    return spec.get("drafted", 0), spec.get("accepted", 0)


def hypnos_config(path: Path, models_dir: Path, speculative: str) -> Path:
    block = lambda model, extra="": (  # noqa: E731
        f'[[models]]\nid = "{model[0]}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
        f'weights_path = "{model[1]}"\nslots = 1\ncontext_len = {CONTEXT}\n{extra}')
    # Always the key: the default ("auto") is a method of its own here.
    key = f"speculative = {speculative}\n"
    text = f'models_dir = "{models_dir}"\n' + block(TARGET, key)
    if "draft =" in speculative:
        text += block(DRAFT)
    path.write_text(text)
    return path


@contextlib.contextmanager
def servers(method: str, models_dir: Path, threads: int, tmp: Path):
    """This method's Hypnos and llama-server Targets (refused ones marked); stopped on exit."""
    ref_args, speculative = METHODS[method]
    with contextlib.ExitStack() as stack:
        targets = []
        cfg = hypnos_config(tmp / f"hypnos-{method}.toml", models_dir, speculative or '"off"')
        hyp = Target("hypnos", "", TARGET[0], {"num_ctx": CONTEXT},
                     predicted=method == "prediction")
        try:
            srv = ServerProcess(cfg, tmp / f"hypnos-{method}.log", ready_timeout=300)
            stack.callback(srv.stop)
            hyp.base = srv.base
        except RuntimeError as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()]
            why = next((line for line in reversed(lines) if "speculative" in line), lines[-1])
            hyp.refused = "the server would not start: " + why.strip()[:200]
        targets.append(hyp)
        if ref_args is not None:
            args = tuple(a.format(draft=models_dir / DRAFT[1]) for a in ref_args)
            # Where Hypnos keeps weights out of llama.cpp's extra buffer types (an AMX host:
            # this llama.cpp's AMX matmul dies with SIGSEGV), llama-server does too.
            args += () if extra_buffers_ok() else ("--no-repack",)
            ref = LlamaServer(llama_server_binary(), models_dir / TARGET[1], threads,
                              tmp / f"llama-server-{method}.log", context=CONTEXT, slots=1,
                              extra=args)
            stack.callback(ref.stop)
            targets.append(Target("llama-server", ref.base, TARGET[0]))
        yield targets


def measure(targets: list[Target], prompts: dict[str, list[dict]], runs: int,
            tokens: int) -> None:
    """Every prompt ``runs`` times, the servers taking turns; a refusal ends that target."""
    for t in targets:
        if not t.refused:
            with contextlib.suppress(Refused):
                t.ask(("warm", 0), {"ask": "Say hi.", "prediction": "Hi."}, 4)
            t.best.clear()
            t.drafted.clear()
            t.accepted.clear()
    for key, prompt in (((s, i), p) for s, ps in prompts.items() for i, p in enumerate(ps)):
        for _ in range(runs):
            for t in targets:
                if t.refused:
                    continue
                try:
                    t.ask(key, prompt, tokens)
                except Refused as exc:
                    t.refused = str(exc)
                    t.best.clear()


def sets_for(method: str, wanted: list[str]) -> list[str]:
    """``none`` runs every set (the baseline), ``prediction`` the edit set, the others the
    code and story sets."""
    sets = {"none": list(SETS), "prediction": ["edit"]}.get(method, ["code", "story"])
    return [s for s in sets if s in wanted]


def run(args) -> dict[tuple[str, str, str], Target]:
    """(set, method, server) -> the Target measured (one Target per server and method)."""
    results: dict[tuple[str, str, str], Target] = {}
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-spec-bench-"))
    for method in args.methods:
        sets = sets_for(method, args.sets)
        if not sets:
            continue
        print(f"-- {method}: {', '.join(sets)}", flush=True)
        with servers(method, args.models_dir, args.threads, tmp) as targets:
            measure(targets, {s: SETS[s] for s in sets}, args.runs, args.tokens)
        for s in sets:
            for t in targets:
                results[(s, method, t.name)] = t
                print_row(s, method, t)
    return results


def print_row(set_name: str, method: str, t: Target) -> None:
    label = "off" if method == "none" and t.name == "hypnos" else method
    rate = t.rate(set_name)
    if rate is None:
        print(f"  {set_name:5} {t.name:12} {label:11} {NOT_AVAILABLE} ({t.refused})", flush=True)
        return
    drafted, accepted = t.drafted.get(set_name, 0), t.accepted.get(set_name, 0)
    drafts = f"  {accepted} of {drafted} drafts accepted" if drafted else ""
    print(f"  {set_name:5} {t.name:12} {label:11} {rate:6.1f} tokens/s{drafts}", flush=True)


def report(results: dict[tuple[str, str, str], Target]) -> None:
    def rate(s: str, m: str, n: str) -> float | None:
        t = results.get((s, m, n))
        return t.rate(s) if t is not None else None

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}" if a and b else NOT_AVAILABLE

    print("\nratios (Hypnos / llama-server side by side per method; across methods: "
          "separate runs)")
    for s in [s for s in SETS if any(k[0] == s for k in results)]:
        for m in ("none", "draft", "draft+ngram", "ngram"):
            if (s, m, "llama-server") in results:
                print(f"  {s:5} {m:11} hypnos / llama-server = "
                      f"{ratio(rate(s, m, 'hypnos'), rate(s, m, 'llama-server'))}")
        off = rate(s, "none", "hypnos")
        for m in ("draft", "draft+ngram", "ngram", "auto", "prediction"):
            if (s, m, "hypnos") in results:
                print(f"  {s:5} hypnos {m} / off = {ratio(rate(s, m, 'hypnos'), off)}")
        for m in ("draft", "draft+ngram", "ngram"):
            if (s, m, "llama-server") in results:
                print(f"  {s:5} llama-server {m} / none = "
                      f"{ratio(rate(s, m, 'llama-server'), rate(s, 'none', 'llama-server'))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--threads", type=int, default=None,
                    help="pin the run to the first N CPUs (default: 2; --fresh: every CPU)")
    ap.add_argument("--tokens", type=int, default=None, help="default: 160; --fresh: 400")
    ap.add_argument("--runs", type=int, default=None, help="default: 2; --fresh: 3")
    ap.add_argument("--sets", type=lambda s: s.split(","), default=list(SETS))
    ap.add_argument("--methods", type=lambda s: s.split(","), default=list(METHODS))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fresh", action="store_true",
                    help="the fresh prompt set on the default chat model: Hypnos default, "
                         "off and auto, llama-server as a reference (speculative_fresh.py)")
    ap.add_argument("--only", type=lambda s: s.split(","), default=None,
                    help="--fresh: these prompts, kinds, families or halves only")
    ap.add_argument("--configs", type=lambda s: s.split(","), default=None,
                    help="--fresh: these Hypnos configs only (default, off, auto; default: all)")
    ap.add_argument("--no-llama-server", action="store_true",
                    help="--fresh: leave the llama-server reference out")
    args = ap.parse_args()
    if args.fresh:
        from hypnos.bench import speculative_fresh
        try:
            speculative_fresh.select(speculative_fresh.PROMPTS, args.only)
        except ValueError as exc:
            ap.error(str(exc))
        speculative_fresh.main(args)
        return
    args.threads, args.tokens, args.runs = args.threads or 2, args.tokens or 160, args.runs or 2
    unknown = set(args.sets) - set(SETS) | set(args.methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown sets or methods: {sorted(unknown)}")
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    args.threads = len(os.sched_getaffinity(0))
    print(f"target {TARGET[1]}, draft {DRAFT[1]}, {args.threads} threads, greedy, "
          f"{args.tokens} tokens, best of {args.runs}", flush=True)
    results = run(args)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(
            [{"set": s, "method": m, "server": n, "tokens_per_s": t.rate(s),
              "drafted": t.drafted.get(s, 0), "accepted": t.accepted.get(s, 0),
              "refused": t.refused,
              "per_prompt": [r for (ks, _), r in sorted(t.best.items()) if ks == s]}
             for (s, m, n), t in results.items()], indent=1))


if __name__ == "__main__":
    main()
