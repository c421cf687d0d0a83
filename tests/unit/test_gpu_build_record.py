"""bench/gpu_build_record.py (issue 40): the build step's facts become build.json (CUDA
version from nvcc, where cuBLAS came from, the GPU's name and memory from nvidia-smi, the
build's seconds and exit) and its printed summary; bench/gpu_check.py puts the headline
first and leaves a partial table that names the checks not run yet."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_build_record as rec  # noqa: E402
import gpu_check  # noqa: E402
from gpu_check_core import Ctx, Row  # noqa: E402


def test_nvidia_smi_and_nvcc_lines_are_read():
    assert rec.parse_gpu("NVIDIA H200, 143771 MiB, 580.65") == \
        {"name": "NVIDIA H200", "memory_mib": 143771, "driver": "580.65"}
    assert rec.parse_gpu("odd") == {"name": "odd", "memory_mib": None, "driver": None}
    assert rec.cuda_version("Cuda compilation tools, release 13.0, V13.0.88") == "13.0"
    assert rec.cuda_version("") is None


def write_facts(path: Path, lines: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{k}\t{v}\n" for k, v in lines))
    return path


def test_build_json_from_the_facts_steps_and_models(tmp_path, capsys):
    facts = write_facts(tmp_path / "facts.tsv", [
        ("dry_run", "0"), ("cores", "16"), ("cuda_requested", "ON"), ("cuda", "ON"),
        ("flash_attention", "OFF"), ("cuda_arch", "90"), ("gpu", "NVIDIA H200, 143771 MiB, 580"),
        ("nvcc_version", "Cuda compilation tools, release 13.0, V13.0.88"),
        ("cublas", "pip /usr/lib/python3/site-packages/nvidia/cublas"),
        ("targets", "llama ggml-cuda"), ("gpu_offload", "True"), ("build_seconds", "287")])
    steps = tmp_path / "steps.tsv"
    steps.write_text("preflight\t0\t1\nbuild_llama\t0\t287\ninstall_llama_cpp\t0\t2\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models/syn-1g-1.gguf").write_bytes(b"x" * 2048)
    out = tmp_path / "build.json"
    assert rec.main(["--facts", str(facts), "--steps", str(steps), "--models",
                     str(tmp_path / "models"), "--out", str(out)]) == 0
    body = json.loads(out.read_text())
    assert body["ok"] and not body["dry_run"] and body["cores"] == 16
    assert body["cuda"]["version"] == "13.0" and body["cuda"]["fallback"] is None
    assert body["cuda"]["cublas"] == {"source": "pip",
                                      "path": "/usr/lib/python3/site-packages/nvidia/cublas"}
    assert body["gpus"][0]["memory_mib"] == 143771 and body["gpu_offload"] is True
    assert body["build"]["seconds"] == 287 and body["build"]["rc"] == 0
    assert body["models"] == {"syn-1g-1.gguf": 2048}
    printed = capsys.readouterr().out
    assert "build: exit 0, 287 s" in printed and "cuBLAS: pip /usr/lib" in printed
    assert "NVIDIA H200 143771 MiB" in printed


def test_a_failed_or_timed_out_build_is_not_ok_and_says_so(tmp_path):
    facts = rec.read_facts(write_facts(tmp_path / "f.tsv", [
        ("cuda", "OFF"), ("cuda_fallback", "no nvcc"), ("build_timed_out", "after 470s")]))
    steps = [{"step": "build_llama", "rc": 124, "seconds": 470}]
    body = rec.record(facts, steps, {})
    assert not body["ok"] and body["build"]["rc"] == 124
    assert body["cuda"]["cublas"] is None and body["gpus"] == []
    text = rec.summary(body)
    assert "timed out after 470s" in text and "FALLBACK: no nvcc" in text


def test_the_swap_workload_runs_first_of_the_gpu_checks():
    gpu = [c.number for c in gpu_check.checks() if c.gpu]
    assert gpu[0] == 5 and sorted(gpu) == [1, 2, 3, 4, 5, 6, 8]


def test_a_stopped_run_leaves_a_table_naming_what_did_not_run(tmp_path):
    ctx = Ctx([Path("m.gguf")], None, None, tmp_path, time.time() + 60)
    build = {"cuda": {"built_with": "ON", "version": "13.0", "cublas": {"source": "toolkit"}},
             "build": {"rc": 0, "seconds": 287}, "flash_attention": "OFF", "cores": 16,
             "gpus": [{"name": "NVIDIA H200", "memory_mib": 143771}]}
    rows = [Row("5 swap", "0.4", "<= 0.5", "pass")]
    gpu_check.write_results(tmp_path, rows, [], ctx, build, ["1 offload", "2 memory"])
    body = json.loads((tmp_path / "gpu_check.json").read_text())
    assert body["pending"] == ["1 offload", "2 memory"] and body["build"] == build
    text = (tmp_path / "gpu_check.txt").read_text()
    assert text.startswith("build: exit 0, 287 s; CUDA ON 13.0 (cuBLAS toolkit")
    assert "not run yet (the run was stopped?): 1 offload, 2 memory" in text
    gpu_check.write_results(tmp_path, rows, [], ctx)
    assert "not run yet" not in (tmp_path / "gpu_check.txt").read_text()


def test_the_table_is_rewritten_before_each_check(tmp_path):
    ctx = Ctx([Path("m.gguf")], None, None, tmp_path, time.time() + 60, smoke=True)
    seen = []
    rows = gpu_check.run_all(ctx, {1, 7}, None, lambda done, pending: seen.append(
        (len(done), [p.split()[0] for p in pending])))
    assert seen == [(0, ["1", "7"]), (1, ["7"])]
    assert [r.check[0] for r in rows] == ["1"] + ["7"] * 4


def test_only_runs_the_checks_in_the_order_given(tmp_path):
    """A short lease runs the open issue's check first: --only's order is the run's."""
    ctx = Ctx([Path("m.gguf")], None, None, tmp_path, time.time() + 60, smoke=True)
    seen = []
    gpu_check.run_all(ctx, [7, 1], None, lambda done, pending: seen.append(
        [p.split()[0] for p in pending]))
    assert seen[0] == ["7", "1"]
