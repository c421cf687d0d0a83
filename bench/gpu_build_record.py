"""The build step's record (issue 40): ``bash bench/gpu_check.sh --build`` notes what it found
as ``key<TAB>value`` lines (``fact``); this turns them, its steps.tsv and the models folder
into ``build.json`` and prints the summary people read.

    python bench/gpu_build_record.py --facts F.tsv --steps steps.tsv --models DIR --out J

Standard library only: it runs with the image's python3 before any wheel is installed.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_core import steps_table  # noqa: E402

MIB = 2**20


def read_facts(path: Path) -> dict[str, list[str]]:
    """Each key's values in the order written (a key such as ``gpu`` may repeat)."""
    facts: dict[str, list[str]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, _, value = line.partition("\t")
            if key:
                facts.setdefault(key, []).append(value)
    return facts


def parse_gpu(line: str) -> dict:
    """One ``nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader``
    line (``NVIDIA H200, 143771 MiB, 580.65``) as name, memory_mib and driver."""
    parts = [p.strip() for p in line.split(",")]
    mem = re.match(r"(\d+)\s*MiB", parts[1]) if len(parts) > 1 else None
    return {"name": parts[0], "memory_mib": int(mem.group(1)) if mem else None,
            "driver": parts[2] if len(parts) > 2 else None}


def cuda_version(nvcc_line: str) -> str | None:
    """``13.0`` from nvcc's ``Cuda compilation tools, release 13.0, V13.0.88``."""
    found = re.search(r"release (\d+\.\d+)", nvcc_line)
    return found.group(1) if found else None


def record(facts: dict[str, list[str]], steps: list[dict], models: dict[str, int]) -> dict:
    """build.json's body. Pure."""
    def one(key: str) -> str | None:
        return facts[key][-1] if key in facts else None

    def num(key: str) -> int | None:
        value = one(key)
        return int(value) if value and value.isdigit() else None

    cublas = one("cublas")
    source, _, where = (cublas or "").partition(" ")
    rcs = {s["step"]: s["rc"] for s in steps}
    offload = one("gpu_offload")
    return {
        "dry_run": one("dry_run") == "1",
        "ok": all(rc in (0, "dry") for rc in rcs.values()),
        "cores": num("cores"),
        "python": one("python"),
        "cuda": {
            "requested": one("cuda_requested"), "built_with": one("cuda"),
            "fallback": one("cuda_fallback"), "arch": one("cuda_arch"), "nvcc": one("nvcc"),
            "version": cuda_version(one("nvcc_version") or ""),
            "cublas": {"source": source, "path": where or None} if cublas else None,
        },
        "flash_attention": one("flash_attention"),
        "gpus": [parse_gpu(g) for g in facts.get("gpu", [])],
        "build": {"seconds": num("build_seconds"), "rc": rcs.get("build_llama"),
                  "reused": one("build_reused"), "timed_out": one("build_timed_out"),
                  "cmake_flags": one("cmake_flags"), "targets": one("targets")},
        "gpu_offload": None if offload is None else offload == "True",
        "models": models,
        "steps": steps,
        "elapsed_seconds": num("elapsed_seconds"),
        "unix_s": int(time.time()),
    }


def summary(body: dict) -> str:
    cuda, build = body["cuda"], body["build"]
    gpus = "; ".join(f"{g['name']} {g['memory_mib']} MiB" for g in body["gpus"]) or "none seen"
    cublas = cuda["cublas"]
    lines = [
        f"build: exit {build['rc']}, {build['seconds']} s"
        + (f" (reused: {build['reused']})" if build["reused"] else "")
        + (f" (timed out {build['timed_out']})" if build["timed_out"] else ""),
        f"CUDA: {cuda['built_with']} (asked {cuda['requested']}), version {cuda['version']}, "
        f"arch {cuda['arch']}, flash attention {body['flash_attention']}"
        + (f"; FALLBACK: {cuda['fallback']}" if cuda["fallback"] else ""),
        "cuBLAS: " + (f"{cublas['source']} {cublas['path'] or ''}".strip() if cublas
                      else "not used (no CUDA build)"),
        f"GPU: {gpus}; cores {body['cores']}; llama_supports_gpu_offload "
        f"{body['gpu_offload']} (true with the RPC backend alone: not proof of CUDA)",
        "models: " + (", ".join(f"{n} {b / MIB:.0f} MiB" for n, b in body["models"].items())
                      or "none"),
        f"ok: {body['ok']}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=Path, required=True)
    ap.add_argument("--steps", type=Path, required=True)
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    models = {p.name: p.stat().st_size for p in sorted(args.models.glob("*.gguf"))} \
        if args.models.is_dir() else {}
    body = record(read_facts(args.facts), steps_table(args.steps), models)
    args.out.write_text(json.dumps(body, indent=1) + "\n")
    sys.stdout.write(summary(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
