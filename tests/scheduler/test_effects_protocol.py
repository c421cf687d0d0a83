"""The one fake of the tests implements the `Effects` Protocol the scheduler calls, as the
real `MachineEffects` does, and the scheduler calls nothing else."""
import inspect
import re
from pathlib import Path

import pytest

from fakes import FakeEffects
from hypnos.service.scheduling.effects import Effects, MachineEffects

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = {"load", "unload", "suspend", "park", "restore", "pin", "unpin", "drop_pages",
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
