"""Why a process that loads a model through Hypnos's engine dies on a GPU. The first GPU run
(2026-12-04, H200, llama.cpp 0.3.36's CUDA build for sm_90) found every check's process dead of
SIGSEGV inside ``llama_model_load_from_file``: llama.cpp's ``print_info`` writing a number to a
``std::stringstream``, the call landing in ``libggml-cuda.so`` (cuda-gdb's stack); a model
loaded through ``llama_cpp.Llama`` on the same build ran. Each variant below loads a model and
times two batch sizes, in its own process with Python's fault handler on:

    python bench/gpu_probe.py MODEL.gguf [--out DIR] [--variants as-is,direct,...]

  as-is      ``LlamaChatEngine`` as it is
  direct     ``llama_cpp.Llama`` instead (the control that ran)
  stdcxx     libstdc++ loaded RTLD_GLOBAL first, so that no other library's copy of a C++
             standard-library function (nvcc's objects export some) is bound in its place
  sysinfo    ``llama_print_system_info()`` called before the load, as ``Llama`` does
  no-preload ``devices.preload_cuda_runtime`` off (the pip CUDA runtime loaded RTLD_GLOBAL)
  gpu0       no layer on the GPU (is it the GPU path?)
  raw        the engine's modules imported, then ``llama_model_load_from_file`` called with
             default parameters and every layer on the GPU (-1): the engine's imports, or
             its load's steps?
  raw-max    the same with ``n_gpu_layers`` 0x7FFFFFFF, the number ``Llama`` passes for -1

Prints one line per variant (its exit status and the last stage it reached), the dynamic
linker's bindings of the faulting symbols for ``as-is`` (``LD_DEBUG``), and, last, ``cure:
NAME``: the first variant of ``CURES`` that ran (``as-is`` when nothing needs curing, ``none``
when none ran). ``apply`` is what ``bench/gpu_patch/sitecustomize.py`` calls in every process
when ``HYPNOS_GPU_PATCHES`` names patches, so the checks can run with the cure.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {"as-is": [], "direct": ["direct"], "stdcxx": ["stdcxx"], "sysinfo": ["sysinfo"],
            "no-preload": ["preload"], "gpu0": ["gpu0"], "raw": ["raw"],
            "raw-max": ["raw", "max"]}
#: The variants that would make a cure for the checks, in the order they are tried.
CURES = ("stdcxx", "sysinfo", "no-preload")
#: The symbols cuda-gdb's stack named at the fault.
FAULT_SYMBOLS = ("_ZNSo9_M_insertIlEERSoT_", "_ZNSo9_M_insertImEERSoT_", "do_unshift")


def apply(patches: list[str]) -> None:
    """Apply the named patches in this process (see the module's text)."""
    if "stdcxx" in patches:
        import ctypes
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    if "sysinfo" in patches:
        from llama_cpp import llama_cpp as ll
        ll.llama_print_system_info()
    if "preload" in patches:
        from hypnos.engines import devices
        devices.preload_cuda_runtime = lambda: []


def choose_cure(ran: dict[str, bool]) -> str:
    """"as-is" when the unpatched load ran (or was not tried), else the first of ``CURES``
    that ran, else "none". ``ran``: variant -> whether its process ended well."""
    if ran.get("as-is", True):
        return "as-is"
    return next((v for v in CURES if ran.get(v)), "none")


def raw(model: Path, stage, n_gpu_layers: int) -> None:
    """The engine's imports, then llama.cpp's model load called directly."""
    import hypnos.engines.llama.engine  # noqa: F401 - what the engine's process imports
    from llama_cpp import llama_cpp as ll
    ll.llama_backend_init()
    params = ll.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    loaded = ll.llama_model_load_from_file(str(model).encode(), params)
    stage(f"loaded (llama_model_load_from_file, n_gpu_layers {n_gpu_layers}): {bool(loaded)}")
    if loaded:
        ll.llama_model_free(loaded)
    stage("unloaded")


def direct(model: Path, stage) -> None:
    """The control: the same model through llama-cpp-python's ``Llama``."""
    from llama_cpp import Llama
    llm = Llama(str(model), n_gpu_layers=-1, n_ctx=2048, verbose=False)
    stage("loaded (llama_cpp.Llama)")
    llm("a b c", max_tokens=4)
    stage("decoded")
    llm.close()
    stage("unloaded")


def child(model: Path, patches: list[str]) -> int:
    def stage(name: str) -> None:
        print(f"STAGE {time.time():.2f} {name}", flush=True)
    stage("start")
    apply(patches)
    if "direct" in patches:
        direct(model, stage)
        return 0
    if "raw" in patches:
        raw(model, stage, 0x7FFFFFFF if "max" in patches else -1)
        return 0
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
    ran: dict[str, bool] = {}
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
        ran[name] = rc == 0
        if rc != 0:
            fault = text[text.find("Fatal Python error"):] if "Fatal Python error" in text \
                else "\n".join(text.splitlines()[-15:])
            print("   " + "\n   ".join(fault.splitlines()[:12]), flush=True)
    if not ran.get("as-is", True):
        bindings(args, env)
    print(f"cure: {choose_cure(ran)}", flush=True)
    return 0


def bindings(args, env: dict) -> None:
    """``as-is`` again under ``LD_DEBUG=scopes,bindings``: where the faulting symbols were
    bound, and libllama's lookup scope (written to probe-ld.txt, the first lines printed)."""
    prefix = Path(tempfile.mkdtemp()) / "ld"
    try:
        subprocess.run([sys.executable, __file__, str(args.model), "--child", ""],
                       env=dict(env, LD_DEBUG="scopes,bindings", LD_DEBUG_OUTPUT=str(prefix)),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=args.timeout)
    except subprocess.TimeoutExpired:
        pass
    found = []
    for part in sorted(prefix.parent.glob("ld.*")):
        with part.open(errors="replace") as f:
            for line in f:
                if any(sym in line for sym in FAULT_SYMBOLS) or \
                        ("scope" in line and ("libllama" in line or "scope 0" in line)) or \
                        "object=" in line:
                    found.append(line.rstrip())
    (args.out / "probe-ld.txt").write_text("\n".join(found) + "\n")
    print(f"LD_DEBUG: {len(found)} lines (probe-ld.txt); the faulting symbols' bindings:")
    for line in [x for x in found if any(sym in x for sym in FAULT_SYMBOLS)][:8]:
        print("   " + line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
