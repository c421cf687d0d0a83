"""``bash bench/gpu_check.sh --dry-run`` on this CPU machine (issue 27): it builds nothing,
writes a 10 MiB synthetic GGUF, runs check 0 (llama.cpp and the app on the CPU) in a child
process, records the GPU checks and what cannot run as skipped with reasons, and exits 0."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_dry_run_passes_and_reports_every_check(tmp_path):
    env = {**os.environ, "GPU_CHECK_WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out"),
           "KIT": str(tmp_path / "no-kit"), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "bench/gpu_check.sh"), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads((tmp_path / "out/gpu_check.json").read_text())
    steps = {s["step"]: s["rc"] for s in body["steps"]}
    assert steps == {"preflight": 0, "wheels": "dry", "link_hypnos": 0, "build_plan": 0,
                     "build_llama": "dry",
                     "install_llama_cpp": "dry", "write_models": 0}
    rows = body["rows"]
    plumbing = [r for r in rows if r["check"].startswith("0 ")]
    assert len(plumbing) == 5 and all(r["verdict"] == "pass" for r in plumbing)
    others = [r for r in rows if not r["check"].startswith("0 ")]
    assert {r["check"][0] for r in others} == set("1234567")
    assert all(r["verdict"] == "skip" and r["reason"] for r in others)
    assert (tmp_path / "work/models/syn-10m.gguf").stat().st_size <= 10 * 2**20
    assert (tmp_path / "work/site/hypnos/service").is_symlink()
    assert "-DGGML_CUDA=ON" in proc.stdout and "-DCMAKE_CUDA_ARCHITECTURES=90" in proc.stdout
    assert "5 pass, 0 fail, 10 skip" in (tmp_path / "out/gpu_check.txt").read_text()


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
