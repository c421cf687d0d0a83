"""The one fake of the tests implements the `Effects` Protocol the scheduler calls, as the
real `MachineEffects` does, and the scheduler calls nothing else; what the effects build is
assigned to the model record by `Residency` alone, and nothing outside scheduling writes a
model record."""
import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from fakes import FakeEffects
from hypnos.service.scheduling.effects import Effects, MachineEffects
from hypnos.service.scheduling.pool import ModelState, Stats

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = {"prepare", "load", "unload", "suspend", "park", "restore", "pin", "unpin", "drop_pages",
           "count_eviction", "count_load_failure"}

effects: Effects = FakeEffects()        # checked statically (a type checker reads this line)


def protocol_members() -> set[str]:
    return {name for name, value in vars(Effects).items()
            if callable(value) and not name.startswith("_")}


def test_the_protocol_lists_what_the_scheduler_needs():
    assert protocol_members() == MEMBERS


@pytest.mark.parametrize("impl", [FakeEffects, MachineEffects])
def test_implementations_define_every_member_with_its_parameters(impl):
    assert isinstance(impl(), Effects)
    for name in protocol_members():
        want = list(inspect.signature(getattr(Effects, name)).parameters)
        got = list(inspect.signature(getattr(impl, name)).parameters)
        assert got == want, f"{impl.__name__}.{name}{got} != Effects.{name}{want}"


def test_the_scheduler_calls_only_protocol_members():
    called = set()
    for module in ("scheduler.py", "residency.py", "pool_changes.py"):
        text = (ROOT / "service" / "scheduling" / module).read_text()
        called |= set(re.findall(r"effects\.(\w+)", text))
    assert called and called <= MEMBERS


def test_nothing_polls():
    """Waiting loads and drains sleep on the release Wakeup, not on a timer."""
    for module in ("scheduler.py", "residency.py", "pool_changes.py"):
        assert "asyncio.sleep" not in (ROOT / "service" / "scheduling" / module).read_text(), module


# What the effects build, assigned to the model record by Residency alone (on the event loop).
RESIDENCY_FIELDS = {"engine", "pinned", "placement", "tier", "last_load", "booked_vs_real"}


def assigned(path: Path) -> list[tuple[int, str, str]]:
    """(line, target, field) of every assignment in ``path`` to an attribute not of ``self``:
    ``a.b.c = ...`` gives the field ``c``, ``a.b.c[k] = ...`` ``c[]``; tuple targets one
    each."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                item = isinstance(t, ast.Subscript)
                if item:
                    t = t.value
                if isinstance(t, ast.Attribute) and not (
                        isinstance(t.value, ast.Name) and t.value.id == "self"):
                    found.append((node.lineno, ast.unparse(t), t.attr + "[]" * item))
    return found


def test_only_residency_assigns_what_the_effects_return():
    """Regression: effects set ``st.engine`` and ``st.pinned`` from worker threads, and the
    fake had to repeat those writes."""
    writers = {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        for line, target, name in assigned(path):
            if name in RESIDENCY_FIELDS:
                writers.setdefault(path.relative_to(ROOT).as_posix(), []).append((line, target))
    assert set(writers) == {"service/scheduling/residency.py"}, writers
    fake = ROOT / "tests" / "fakes.py"
    assert not [a for a in assigned(fake) if a[2] in RESIDENCY_FIELDS]


def test_nothing_outside_scheduling_writes_a_model_record():
    """Routes, the inference layer and start-up staging read `ModelState`; what they learn
    goes through the scheduler (a lease's ``prefill_tokens_per_s``, ``Scheduler.add``).
    Regression: staging replaced pool entries and the chat path wrote the model's
    statistics."""
    fields = {f.name for f in dataclasses.fields(ModelState)} | set(vars(Stats())) | {"models[]"}
    outside = [p for p in sorted((ROOT / "service").rglob("*.py"))
               if "scheduling" not in p.parts]
    writes = [(p.relative_to(ROOT).as_posix(), line, target)
              for p in outside for line, target, name in assigned(p)
              if name in fields and not target.startswith("request.ctx.")]
    assert writes == []
