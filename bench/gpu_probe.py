"""Why a process that loads a model through Hypnos's engine dies on a GPU (the first GPU check
ran on 2026-12-04: every check's process died with SIGSEGV, while ``llama_cpp.Llama`` on the
same build and model ran). Each variant loads a model through ``LlamaChatEngine`` on every GPU
layer and times two batch sizes, in its own process with Python's fault handler on, with one
suspect turned off by a patch:

    python bench/gpu_probe.py MODEL.gguf [--out DIR] [--variants as-is,no-preload,...]

  preload   ``devices.preload_cuda_runtime`` (the pip CUDA runtime loaded RTLD_GLOBAL)
  extra     ``extra_buffers_ok`` forced True (it is False on a CPU with AMX)
  log       ggml's log callback into ``logging``
  gpu0      no layer on the GPU (a control: is it the GPU path?)

Prints one line per variant (its exit status and the last stage it reached) and, last,
``cure: NAME`` (the first patched variant that ran, or ``none``). ``apply`` is what
``bench/gpu_patch/sitecustomize.py`` calls in every process when ``HYPNOS_GPU_PATCHES`` names
patches, so the checks can run with the cure while the cause is fixed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {"as-is": [], "no-preload": ["preload"], "extra-bufts": ["extra"],
            "no-log": ["log"], "gpu0": ["gpu0"], "all-three": ["preload", "extra", "log"]}


def apply(patches: list[str]) -> None:
    """Turn the named suspects off in this process (see the module's text)."""
    if "preload" in patches:
        from hypnos.engines import devices
        devices.preload_cuda_runtime = lambda: []
    if "extra" in patches:
        import importlib
        for name in ("hypnos.engines.llama.cpu", "hypnos.engines.llama.loading",
                     "hypnos.engines.llama.embed", "hypnos.engines.llama.rerank"):
            try:
                setattr(importlib.import_module(name), "extra_buffers_ok", lambda *a: True)
            except ImportError as exc:
                print(f"gpu_probe: {name}: {exc}", file=sys.stderr)
    if "log" in patches:
        from hypnos.engines.llama import log
        log.route_once = lambda *a, **k: None


def child(model: Path, patches: list[str]) -> int:
    def stage(name: str) -> None:
        print(f"STAGE {time.time():.2f} {name}", flush=True)
    stage("start")
    apply(patches)
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import LoadSpec
    stage("imported")
    engine = LlamaChatEngine()
    engine.load(LoadSpec("probe", model, context_len=2048, slots=1, threads=None,
                         gpu_layers=0 if "gpu0" in patches else -1,
                         options={"speculative": "off"}))
    stage(f"loaded offloaded={engine.offloaded_layers} device={engine.device}")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from spec_step_costs import measure
    med = measure(engine, [1, 2], 1, 64)
    stage("decoded " + " ".join(f"{b}:{s * 1e3:.2f}ms" for b, s in med.items()))
    engine.unload()
    stage("unloaded")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    if args.child is not None:
        return child(args.model, [p for p in args.child.split(",") if p])
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    env.pop("HYPNOS_GPU_PATCHES", None)
    cure = None
    for name in args.variants.split(","):
        patches = VARIANTS[name]
        log = args.out / f"probe-{name}.log"
        t0 = time.time()
        try:
            with log.open("w") as f:
                rc = subprocess.run([sys.executable, __file__, str(args.model), "--child",
                                     ",".join(patches)], stdout=f, stderr=subprocess.STDOUT,
                                    env=env, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        text = log.read_text(errors="replace")
        stages = [line.split(" ", 2)[1:] for line in text.splitlines()
                  if line.startswith("STAGE ")]
        last = stages[-1][1] if stages and len(stages[-1]) > 1 else "-"
        print(f"variant {name:<12} exit {rc!s:<8} {time.time() - t0:5.1f} s  last: {last}",
              flush=True)
        if rc != 0:
            fault = text[text.find("Fatal Python error"):] if "Fatal Python error" in text \
                else "\n".join(text.splitlines()[-15:])
            print("   " + "\n   ".join(fault.splitlines()[:30]), flush=True)
        elif cure is None and patches and "gpu0" not in patches:
            cure = name
        if name == "as-is" and rc == 0:
            cure = "as-is"
    print(f"cure: {cure or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
