"""bench/gpu_check_core.py: a check's Skip, exception or lack of time becomes a row and the
run goes on; the table counts verdicts; gpu_check.sh's steps file is read."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from gpu_check_core import Check, Ctx, Row, Skip, judged, render, run_check, steps_table  # noqa: E402


def ctx(left_s: float = 600, smoke: bool = False) -> Ctx:
    return Ctx([Path("m.gguf")], None, None, Path("out"), time.time() + left_s, smoke)


def fails(_ctx):
    raise RuntimeError("cuda went away")


def skips(_ctx):
    raise Skip("no llama-server binary")


def passes(_ctx):
    return [judged("9 ok", "1", "1", True), judged("9 bad", "0", "1", False)]


def test_an_exception_is_the_checks_failure_with_its_message():
    rows = run_check(Check(9, "boom", fails, 0), ctx())
    assert [(r.verdict, r.reason) for r in rows] == [("fail", "RuntimeError: cuda went away")]


def test_skip_carries_its_reason():
    rows = run_check(Check(9, "s", skips, 0), ctx())
    assert [(r.check, r.verdict, r.reason) for r in rows] == \
        [("9 s", "skip", "no llama-server binary")]


def test_too_little_time_left_skips_without_running():
    rows = run_check(Check(9, "slow", fails, 120), ctx(left_s=60))
    assert rows[0].verdict == "skip" and rows[0].reason.startswith("out of time")


def test_smoke_skips_gpu_checks_but_runs_the_others():
    assert run_check(Check(9, "g", passes, 0), ctx(smoke=True))[0].verdict == "skip"
    got = run_check(Check(9, "c", passes, 0, gpu=False), ctx(smoke=True))
    assert [r.verdict for r in got] == ["pass", "fail"]
    assert all("check_seconds" in r.data for r in got)


def test_a_verdict_outside_the_three_is_refused():
    with pytest.raises(ValueError):
        Row("x", "-", "-", "ok")


def test_steps_and_table(tmp_path):
    steps = tmp_path / "steps.tsv"
    steps.write_text("preflight\t0\t1\nbuild_llama\tdry\t0\nwheels\t2\t5\n")
    parsed = steps_table(steps)
    assert parsed == [{"step": "preflight", "rc": 0, "seconds": 1},
                      {"step": "build_llama", "rc": "dry", "seconds": 0},
                      {"step": "wheels", "rc": 2, "seconds": 5}]
    assert steps_table(tmp_path / "absent.tsv") == []
    rows = passes(None) + [Row("7 x", "-", "-", "skip", "too big")]
    text = render(rows, parsed)
    assert text.rstrip().endswith("1 pass, 1 fail, 1 skip")
    assert "(too big)" in text and "build_llama" in text


def test_vram_growth_keeps_to_one_measure():
    from gpu_checks_engine import vram_growth
    assert vram_growth((5000, 300), (9000, 4300)) == (4000, "process")
    # A process with no CUDA context yet is not listed: the device's figure, both times.
    assert vram_growth((5000, None), (9000, 4300)) == (4000, "device")


def test_the_tolerance_is_5_percent_or_256_mib():
    from gpu_checks_engine import MIB, within
    assert within(1000 * MIB + 255 * MIB, 1000 * MIB)
    assert not within(1000 * MIB + 257 * MIB, 1000 * MIB)
    assert within(int(8000 * MIB * 1.049), 8000 * MIB)
    assert not within(int(8000 * MIB * 1.06), 8000 * MIB)


def test_the_checks_configs_parse_and_the_budget_holds_one_model_not_two(tmp_path):
    import tomllib

    import synthetic_gguf
    from gpu_checks_engine import config_text, one_model_budget, tier1_booking

    from hypnos.planner.budgets import VRAM_RESERVE_BYTES
    from hypnos.service.config.load import parse_config
    models = [tmp_path / f"syn-{i}.gguf" for i in range(3)]
    for i, m in enumerate(models):
        synthetic_gguf.write(m, 4 * 2**20, seed=i)
    budget = one_model_budget(models[0])
    cfg = parse_config(tomllib.loads(config_text(models, vram=budget, slots=4,
                                                 ids=["a", "b", "chat"])))
    assert [m.id for m in cfg.models] == ["a", "b", "chat"]
    assert {(m.slots, m.context_len) for m in cfg.models} == {(4, 4 * 2048)}
    assert cfg.hardware.simulate.vram_bytes == budget
    booking, layer = tier1_booking(models[0])
    assert 0 < layer < booking
    assert booking <= budget - VRAM_RESERVE_BYTES < 2 * booking
