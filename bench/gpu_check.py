"""The device check (issues 17 and 27): on an NVIDIA machine, Hypnos on synthetic llama GGUFs
with llama.cpp's CUDA build, against NVML, the pinned host-to-device bandwidth and
llama.cpp's own ``llama-server``. Writes ``gpu_check.json`` and ``gpu_check.txt`` to --out;
exits 1 when a check fails, 0 otherwise (skipped checks are listed with their reason, never
counted as passed).

    bash bench/gpu_check.sh --build     # on the device: builds, writes the models; then
    bash bench/gpu_check.sh             # runs this on that build
    python bench/gpu_check.py --models A.gguf B.gguf C.gguf --large L.gguf \\
        --llama-server BUILD/bin/llama-server --out DIR [--deadline UNIX_S]
    python bench/gpu_check.py --cpu-smoke --model SMALL.gguf --out DIR   # any CPU machine

Checks (bench/gpu_checks_engine.py, bench/gpu_checks_serving.py,
bench/gpu_checks_speculation.py):
  1. the build offloads (``llama_supports_gpu_offload()``), /health says backend cuda,
     accelerator true, and llama.cpp offloaded every layer;
  2. memory truth: NVML's per-process VRAM growth against the booking, both models, within
     5 % or 256 MiB; demotion frees it;
  3. tier moves 1->2->1 and 1->3->1: the promotion's GiB/s against the pinned host-to-device
     copy of the model's bytes measured in the same run (PyTorch, else CuPy); target >= 50 %;
  4. decode tokens/s on the GPU against the CPU (in-process), and Hypnos against llama-server
     on the GPU, same file, single stream and 4 concurrent;
  5. the swap workload on the GPU: three ~1 GiB models, tier 1 holding one (simulated
     budget), round-robin, Hypnos against ``llama-server --models-max 1``;
  6. a simulated tier-1 budget splits layers as the planner says, and KV parking across a GPU
     swap restores the conversation;
  7. what cannot run there, listed as skipped with the reason;
  8. speculation (issue 39): batches of every draft length timed on a GGUF of the default
     chat model's shape, and the default's gain over ``off`` on the fresh prompt set
     modelled from answers recorded on a CPU (bench/gpu_checks_speculation.py).
Every check runs whatever the others did (an exception is its failure) and is skipped when
--deadline leaves it too little time. ``--cpu-smoke`` runs the plumbing on the CPU (check 0,
only there: llama.cpp, the app, its routes and tier moves on the small model) and records
checks 1-6 as skipped for want of a GPU.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_core import Check, Ctx, Row, render, run_check, steps_table  # noqa: E402


def checks() -> list[Check]:
    import gpu_checks_engine as eng
    import gpu_checks_serving as srv
    import gpu_checks_speculation as spec
    return [
        Check(0, "plumbing on the CPU", eng.check_plumbing, 10, gpu=False),
        # The headline first, so that whatever else runs out of time, it has been measured.
        Check(5, "swap workload vs llama-server router", srv.check_swap_workload, 120),
        Check(1, "offload and /health", eng.check_offload, 30),
        # Issue 39's open bounds, which only a GPU can settle: short, so early.
        Check(8, "speculation: step costs, default vs off", spec.check_spec_costs, 45),
        Check(2, "memory truth vs NVML", eng.check_memory_truth, 60),
        Check(3, "tier moves vs pinned H2D", eng.check_tier_moves, 60),
        Check(4, "decode GPU vs CPU, vs llama-server", srv.check_decode, 90),
        Check(6, "layer split and KV parking", eng.check_split_and_parking, 60),
        Check(7, "not runnable there", srv.check_not_runnable, 0, gpu=False),
    ]


def write_results(out: Path, rows: list[Row], steps: list[dict], ctx: Ctx,
                  build: dict | None = None, pending: list[str] | None = None) -> None:
    """gpu_check.json and gpu_check.txt; ``pending``: the checks not run yet (a partial
    table, rewritten after every check so that a run stopped from outside leaves one)."""
    out.mkdir(parents=True, exist_ok=True)
    body = {"steps": steps, "rows": [asdict(r) for r in rows], "notes": ctx.notes,
            "smoke": ctx.smoke, "build": build, "pending": pending or [],
            "unix_s": int(time.time())}
    text = build_line(build) + render(rows, steps)
    if pending:
        text += "not run yet (the run was stopped?): " + ", ".join(pending) + "\n"
    for name, data in (("gpu_check.json", json.dumps(body, indent=1, default=str) + "\n"),
                       ("gpu_check.txt", text)):
        tmp = out / f".{name}.tmp"
        tmp.write_text(data)
        tmp.replace(out / name)


def build_line(build: dict | None) -> str:
    """The build step's record in one line for the table's head; "" without one."""
    if not build:
        return ""
    cuda, b = build.get("cuda") or {}, build.get("build") or {}
    cublas = (cuda.get("cublas") or {}).get("source") or "-"
    gpus = ", ".join(f"{g.get('name')} {g.get('memory_mib')} MiB"
                     for g in build.get("gpus") or []) or "no GPU seen"
    return (f"build: exit {b.get('rc')}, {b.get('seconds')} s; CUDA {cuda.get('built_with')} "
            f"{cuda.get('version') or ''} (cuBLAS {cublas}, flash attention "
            f"{build.get('flash_attention')}); {gpus}; {build.get('cores')} cores\n\n")


def run_isolated(check: Check, ctx: Ctx, argv: list[str]) -> tuple[list[Row], bool]:
    """Run ``check`` in a child process (this script with ``--only N --child FILE``), so a
    crash in CUDA code or a hang costs that check only: a child killed by a signal, or past
    twice its expected time (within the deadline), is that check's failure. Returns the rows
    and whether the child printed them already."""
    label = f"{check.number} {check.name}"
    if (check.gpu and ctx.smoke) or ctx.left() < check.needs_s:
        return run_check(check, ctx), False   # the skip row, without a child
    limit = max(check.needs_s, min(2 * check.needs_s + 30, ctx.left()))
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        rows_file = Path(tmp) / "rows.json"
        cmd = [sys.executable, __file__, *argv, "--only", str(check.number), "--child",
               str(rows_file)]
        try:
            proc = subprocess.run(cmd, timeout=limit)
        except subprocess.TimeoutExpired:
            return [Row(label, "-", "-", "fail", f"timed out after {limit:.0f} s")], False
        if not rows_file.is_file():
            return [Row(label, "-", "-", "fail", f"the check's process died (exit "
                        f"{proc.returncode}) before writing its rows")], False
        return [Row(**r) for r in json.loads(rows_file.read_text())], True


def run_all(ctx: Ctx, only: Iterable[int] | None = None, argv: list[str] | None = None,
            progress=None) -> list[Row]:
    """Every check (or those in ``only``) in order, each in its own process unless ``argv``
    is None (then inline); prints each row as it comes. ``progress(rows so far, the checks
    not run yet)`` is called before each check."""
    rows: list[Row] = []
    todo = [c for c in checks() if (only is None or c.number in only)
            and (c.number != 0 or ctx.smoke)]   # check 1 covers 0 where there is a GPU
    if only is not None:                        # --only's order is the run's order
        order = list(only)
        todo.sort(key=lambda c: order.index(c.number))
    for i, check in enumerate(todo):
        if progress:
            progress(rows, [f"{c.number} {c.name}" for c in todo[i:]])
        print(f"-- check {check.number} {check.name} ({ctx.left():.0f} s left)", flush=True)
        got, printed = (run_check(check, ctx), False) if argv is None else \
            run_isolated(check, ctx, argv)
        for r in [] if printed else got:
            print(f"   {r.verdict:<5}{r.check}: {r.measured} (expected {r.expected})"
                  + (f" - {r.reason}" if r.reason else ""), flush=True)
        rows += got
    return rows


def parent_argv(args) -> list[str]:
    """The options a child gets: the same run, a fixed deadline, no --only/--out/--steps."""
    argv = ["--models", *map(str, args.models)] if args.models else []
    argv += ["--model", str(args.model)] if args.model else []
    argv += ["--large", str(args.large)] if args.large else []
    argv += ["--llama-server", str(args.llama_server)] if args.llama_server else []
    argv += ["--cpu-smoke"] if args.cpu_smoke else []
    return argv + ["--out", str(args.out), "--deadline", str(args.deadline)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, nargs="*", default=[],
                    help="the ~1 GiB GGUFs; the first is the main one, three for check 5")
    ap.add_argument("--model", type=Path, help="one GGUF (the --cpu-smoke model)")
    ap.add_argument("--large", type=Path, help="the ~8 GiB GGUF (check 2)")
    ap.add_argument("--llama-server", type=Path, help="llama-server of the same build")
    ap.add_argument("--out", type=Path, default=Path("gpu-check-out"))
    ap.add_argument("--steps", type=Path, help="gpu_check.sh's steps.tsv")
    ap.add_argument("--build-record", type=Path,
                    help="the build step's build.json, copied into gpu_check.json")
    ap.add_argument("--deadline", type=float, help="unix seconds; default now + 8 minutes")
    ap.add_argument("--only", help="check numbers, comma-separated, run in that order")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="no GPU: run the plumbing on the CPU, skip the GPU checks")
    ap.add_argument("--inline", action="store_true", help="all checks in this process")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.deadline = args.deadline or time.time() + 480
    args.out.mkdir(parents=True, exist_ok=True)
    models = [m.resolve() for m in args.models + ([args.model] if args.model else [])]
    if not models:
        ap.error("give --models or --model")
    ctx = Ctx(models, args.large.resolve() if args.large else None,
              args.llama_server, args.out, args.deadline, args.cpu_smoke)
    only = [int(x) for x in args.only.split(",")] if args.only else None
    if args.child:
        rows = run_all(ctx, only)
        args.child.write_text(json.dumps([asdict(r) for r in rows], default=str))
        return 0
    steps = steps_table(args.steps)
    build = json.loads(args.build_record.read_text()) \
        if args.build_record and args.build_record.is_file() else None
    rows = run_all(ctx, only, None if args.inline else parent_argv(args),
                   lambda done, pending: write_results(args.out, done, steps, ctx, build,
                                                       pending))
    write_results(args.out, rows, steps, ctx, build)
    print(render(rows, steps), flush=True)
    failed = any(r.verdict == "fail" for r in rows) or \
        any(s["rc"] not in (0, "dry") for s in steps)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
