"""``bash bench/gpu_check.sh`` on this CPU machine (issues 27 and 40), as a subprocess of the
real script: both steps' ``--dry-run`` (the build step records what it found and the build it
would run; the checks step writes a 10 MiB synthetic GGUF, runs check 0 in a child process
and records the GPU checks as skipped), a dry run that ignores what a real run left in the
work folder, an unknown flag refused with exit 2, and the checks refused (exit 3) without a
build."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "bench/gpu_check.sh")
BUILD_STEPS = {"preflight": 0, "wheels": "dry", "link_hypnos": 0, "build_plan": 0,
               "build_llama": "dry", "install_llama_cpp": "dry", "write_models": 0}


def run(tmp_path: Path, *args: str, timeout: float = 120, **env: str):
    full = {**os.environ, "GPU_CHECK_WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out"),
            "KIT": str(tmp_path / "no-kit"), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", SCRIPT, *args], env=full, capture_output=True, text=True,
                          timeout=timeout)


def fake_tools(tmp_path: Path) -> dict[str, str]:
    """An nvcc and an nvidia-smi that print what the device's would: the dry build step only
    reads their versions (it compiles nothing)."""
    bin_dir = tmp_path / "cuda/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nvcc").write_text(
        "#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB, 580.65'\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {"GPU_CHECK_NVCC": str(bin_dir / "nvcc"),
            "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def leave_a_real_runs_work(work: Path) -> None:
    """What a real run whose build failed leaves: a llama_cpp without its libraries in site/
    (imported first from PYTHONPATH, it failed every later dry run), a build marker, a
    build.json."""
    (work / "site/llama_cpp").mkdir(parents=True)
    (work / "site/llama_cpp/__init__.py").write_text(
        "raise FileNotFoundError(\"Shared library with base name 'llama' not found\")\n")
    (work / "build").mkdir()
    (work / "build/.hypnos-built").write_text("2026-01-01T00:00:00Z\nother flags\n")
    (work / "build.json").write_text("{}")


@pytest.mark.parametrize("flags", [[], ["--fa"]])
def test_the_build_step_dry_run_records_cuda_cublas_and_the_gpu(tmp_path, flags):
    proc = run(tmp_path, "--build", "--dry-run", *flags, **fake_tools(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads((tmp_path / "out/build.json").read_text())
    assert {s["step"]: s["rc"] for s in body["steps"]} == BUILD_STEPS
    assert body["dry_run"] and body["ok"]
    fa = "ON" if flags else "OFF"
    assert body["flash_attention"] == fa and f"-DGGML_CUDA_FA={fa}" in proc.stdout
    assert body["cuda"]["built_with"] == "ON" and body["cuda"]["fallback"] is None
    assert body["cuda"]["version"] == "13.0"
    assert body["cuda"]["cublas"]["source"] in ("toolkit", "pip", "missing")
    assert body["gpus"] == [{"name": "NVIDIA H200", "memory_mib": 143771, "driver": "580.65"}]
    assert body["cores"] > 0
    assert "-DGGML_CUDA=ON" in proc.stdout and "-DCMAKE_CUDA_ARCHITECTURES=90" in proc.stdout
    assert "ggml-cuda" in body["build"]["targets"]
    assert "CUDA: ON (asked ON), version 13.0" in proc.stdout     # the printed summary
    assert (tmp_path / "work/dry-run/build.json").is_file()


def test_without_nvcc_the_build_step_falls_back_to_the_cpu_and_says_so(tmp_path):
    proc = run(tmp_path, "--build", "--dry-run", GPU_CHECK_NVCC=str(tmp_path / "no-nvcc"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads((tmp_path / "out/build.json").read_text())
    assert body["cuda"]["built_with"] == "OFF" and "no nvcc" in body["cuda"]["fallback"]
    assert body["cuda"]["cublas"] is None
    assert "ggml-cuda" not in body["build"]["targets"]
    assert "-DGGML_CUDA=OFF" in proc.stdout and "CPU FALLBACK" in proc.stdout
    assert "-DGGML_CUDA_FA" not in proc.stdout


def test_the_checks_dry_run_passes_and_ignores_a_real_runs_leftovers(tmp_path):
    """Regression: after a real run, --dry-run failed with "Shared library with base name
    'llama' not found" (the run's site/llama_cpp shadowed the venv's) until the work folder
    was removed. A dry run now works in its own fresh folder."""
    leave_a_real_runs_work(tmp_path / "work")
    proc = run(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads((tmp_path / "out/gpu_check.json").read_text())
    assert {s["step"]: s["rc"] for s in body["steps"]} == {"link_hypnos": 0, "write_models": 0}
    assert body["pending"] == []
    rows = body["rows"]
    plumbing = [r for r in rows if r["check"].startswith("0 ")]
    assert len(plumbing) == 5 and all(r["verdict"] == "pass" for r in plumbing)
    others = [r for r in rows if not r["check"].startswith("0 ")]
    assert others[0]["check"].startswith("5 ")          # the headline first
    assert {r["check"][0] for r in others} == set("12345678")
    assert all(r["verdict"] == "skip" and r["reason"] for r in others)
    dry = tmp_path / "work/dry-run"
    assert (dry / "models/syn-10m.gguf").stat().st_size <= 10 * 2**20
    assert (dry / "site/hypnos/service").is_symlink()
    assert not (dry / "site/llama_cpp").exists()
    assert "5 pass, 0 fail, 11 skip" in (tmp_path / "out/gpu_check.txt").read_text()


@pytest.mark.parametrize("args", [["--bogus"], ["--build", "--bogus"], ["--fa"]])
def test_an_unknown_flag_is_refused_with_usage_and_exit_2(tmp_path, args):
    proc = run(tmp_path, *args, timeout=20)
    assert proc.returncode == 2
    assert "usage: bash bench/gpu_check.sh" in proc.stderr
    assert not (tmp_path / "work").exists()          # nothing started


def test_the_checks_without_a_build_are_refused_pointing_at_build(tmp_path):
    leave_a_real_runs_work(tmp_path / "work")        # a marker, but no llama-server, no libs
    proc = run(tmp_path, timeout=30)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "bash bench/gpu_check.sh --build" in proc.stdout
    assert "no llama_cpp with its libraries" in proc.stdout
    assert "--build" in json.loads((tmp_path / "out/gpu_check.json").read_text())["error"]


def test_a_failing_check_is_reported_and_the_run_goes_on(tmp_path):
    """Check 0 on a file that is no GGUF fails (in its child process) and check 7 still runs;
    the exit status is 1."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    proc = subprocess.run([sys.executable, str(ROOT / "bench/gpu_check.py"), "--cpu-smoke",
                           "--model", str(bad), "--only", "0,7", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads((tmp_path / "o/gpu_check.json").read_text())["rows"]
    assert [r["verdict"] for r in rows if r["check"].startswith("0 ")] == ["fail"]
    assert rows[0]["reason"]
    assert [r["verdict"] for r in rows if r["check"].startswith("7 ")] == ["skip"] * 4
