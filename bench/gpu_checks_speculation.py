"""Check 8 of the GPU check (issue 39): what a drafted position costs on the GPU, and what
the default speculation (``speculative = "auto"``) would gain there on the fresh prompt set.

The default chat model cannot reach a lent machine (no network, 64 MiB a call), and what a
batch of b positions costs depends on the model's shape, not on its weights. So the check
writes a GGUF of the default model's shape (``synthetic_gguf.QWEN25_05B``, F16 noise), times
batches of every draft length on the GPU as ``spec_step_costs.py`` does on a CPU, and replays
the default model's greedy answers recorded on a CPU (``spec_replay_answers.json``) through
the engine's drafter with those costs (``spec_replay.py``). The verdicts are issue 39's on
the modelled decode rates: default / off at least 0.97 on every prompt that does not copy,
at least 1.3 on every one that does. Modelled, and said so in each row: the drafter's time
and the server around it are left out; the costs are the GPU's own.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_core import Ctx, Row, Skip, judged  # noqa: E402

#: What the check times in a plumbing run on a CPU (``GPU_CHECK_PLUMBING``): a few sizes.
PLUMBING_SIZES = [1, 2, 4, 8, 16]


def shaped_model() -> Path:
    """The default model's shape as a GGUF (1.2 GiB) in the temporary folder, written once
    (not beside the check's models: a path given may be a link into someone's models)."""
    import synthetic_gguf
    folder = Path(tempfile.gettempdir()) / "hypnos-gpu-check"
    folder.mkdir(exist_ok=True)
    path = folder / "syn-qwen2.5-0.5b-shape.gguf"
    if not path.is_file():
        tmp = path.with_suffix(".part")
        synthetic_gguf.write(tmp, 0, seed=5, shape=synthetic_gguf.QWEN25_05B)
        tmp.replace(path)
    return path


def check_spec_costs(ctx: Ctx) -> list[Row]:
    from hypnos.bench.spec_replay import ANSWERS, StepCosts, default_figures, replay_set
    from hypnos.bench.spec_step_costs import SIZES, costs_record, measure_costs
    from hypnos.bench.speculative_fresh_prompts import PROMPTS
    if not ANSWERS.is_file():
        raise Skip(f"no recorded answers ({ANSWERS.name}): spec_replay.py --record")
    import json
    plumbing = os.environ.get("GPU_CHECK_PLUMBING") == "1"
    model = shaped_model()
    sizes = PLUMBING_SIZES if plumbing else SIZES
    med = measure_costs(model, None, sizes, rounds=3 if plumbing else 9)
    record = costs_record(med, model, None, where=f"{model.name}, the GPU check")
    (ctx.out / "spec_step_costs.json").write_text(json.dumps(record, indent=1) + "\n")
    costs = StepCosts.from_record(record)
    shown = ", ".join(f"{b}: {costs.steps[b]:.2f}" for b in (2, 4, 8, 16, 64)
                      if b in costs.steps)
    rows = [judged("8 batch cost in plain steps (b: steps)", shown,
                   "measured at every size", len(med) == len(set(sizes) | {1}),
                   plain_ms=round(record["plain_ms"], 3), steps=record["steps"])]
    answers = json.loads(ANSWERS.read_text())
    results = replay_set(answers, PROMPTS, costs, runs=1 if plumbing else 3)
    for family in ("plain", "copying"):
        target = 0.97 if family == "plain" else 1.3
        figures = [f for f in default_figures(results) if f.group == family]
        least = min((f.least for f in figures if f.least is not None), default=None)
        shown = ", ".join(f"{f.half} {f.geomean:.2f} (least {f.least:.2f})" for f in figures
                          if f.geomean is not None and f.least is not None)
        rows.append(judged(f"8 default/off {family}, modelled", shown or "-",
                           f">= {target} every prompt", least is not None and least >= target,
                           figures=[vars(f) for f in figures]))
    return rows
