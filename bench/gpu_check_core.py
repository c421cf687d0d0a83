"""What bench/gpu_check.py's checks share: the rows they return (pass, fail or skip, with a
reason), the run's context, and the runner that turns a check's Skip, lack of time or
exception into rows, so one call reports everything. Pure apart from the clock."""
from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

VERDICTS = ("pass", "fail", "skip")


@dataclass
class Row:
    """One line of the table: a measured figure against what was expected."""
    check: str
    measured: str
    expected: str
    verdict: str                      # pass | fail | skip
    reason: str = ""                  # why it failed or was skipped
    data: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


def judged(check: str, measured: str, expected: str, ok: bool, **data) -> Row:
    return Row(check, measured, expected, "pass" if ok else "fail", data=data)


class Skip(Exception):
    """Raised by a check that cannot run here; its message is the reason."""


@dataclass
class Ctx:
    """What every check may use. ``models``: the ~1 GiB GGUFs (the first is the main one);
    ``large``: the ~8 GiB one; ``deadline``: unix seconds by which all checks must be done."""
    models: list[Path]
    large: Path | None
    llama_server: Path | None
    out: Path
    deadline: float
    smoke: bool = False
    notes: dict = field(default_factory=dict)

    def left(self) -> float:
        return self.deadline - time.time()


@dataclass(frozen=True)
class Check:
    number: int
    name: str
    run: Callable[[Ctx], list[Row]]
    needs_s: float                    # skipped when less time than this is left
    gpu: bool = True                  # skipped in --cpu-smoke


def run_check(check: Check, ctx: Ctx) -> list[Row]:
    """Run one check, turning Skip, lack of time and any exception into rows; never raises."""
    label = f"{check.number} {check.name}"
    if check.gpu and ctx.smoke:
        return [Row(label, "-", "-", "skip", "no GPU: --cpu-smoke runs the plumbing only")]
    if ctx.left() < check.needs_s:
        return [Row(label, "-", "-", "skip",
                    f"out of time: {ctx.left():.0f} s left, needs ~{check.needs_s:.0f} s")]
    t0 = time.time()
    try:
        rows = check.run(ctx)
    except Skip as exc:
        rows = [Row(label, "-", "-", "skip", str(exc))]
    except BaseException as exc:      # a check's failure must not end the call
        if isinstance(exc, KeyboardInterrupt):
            raise
        tb = traceback.format_exc(limit=4)
        print(tb, file=sys.stderr, flush=True)
        rows = [Row(label, "-", "-", "fail", f"{type(exc).__name__}: {exc}"[:500])]
    for row in rows:
        row.data.setdefault("check_seconds", round(time.time() - t0, 2))
    return rows


def steps_table(path: Path | None) -> list[dict]:
    """gpu_check.sh's steps.tsv (name, exit status or "dry", seconds) as records; [] without
    one."""
    if path is None or not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, rc, secs = (line.split("\t") + ["", ""])[:3]
        rows.append({"step": name, "rc": int(rc) if rc.lstrip("-").isdigit() else rc,
                     "seconds": int(secs or 0)})
    return rows


def render(rows: list[Row], steps: list[dict]) -> str:
    """The table people read: the shell steps, then one line per row."""
    lines = [f"{'step':<20}{'exit':<6}seconds"]
    lines += [f"{s['step']:<20}{s['rc']:<6}{s['seconds']}" for s in steps]
    lines.append("")
    lines.append(f"{'check':<48}{'measured':<40}{'expected':<34}verdict")
    for r in rows:
        tail = f"  ({r.reason})" if r.reason else ""
        lines.append(f"{r.check:<48}{r.measured:<40}{r.expected:<34}{r.verdict}{tail}")
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    lines.append("")
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()))
    return "\n".join(lines) + "\n"


