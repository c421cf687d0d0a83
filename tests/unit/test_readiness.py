"""Readiness transitions (service/scheduling/readiness.py): STARTING -> READY -> DRAINING,
DRAINING final, a second SIGTERM seen as such; and `AppState` refuses stray attributes."""
import dataclasses

import pytest

from hypnos.service.scheduling.readiness import (Lifecycle, Readiness, after_sigterm,
                                                 after_staging)
from hypnos.service.state import AppState

STARTING, READY, DRAINING = Readiness.STARTING, Readiness.READY, Readiness.DRAINING


@pytest.mark.parametrize(("now", "staged", "drained"), [
    (STARTING, READY, DRAINING),
    (READY, READY, DRAINING),
    (DRAINING, DRAINING, DRAINING),      # staging that ends during a drain does not undo it
])
def test_transitions(now, staged, drained):
    assert after_staging(now) is staged
    assert after_sigterm(now) is drained


def test_lifecycle_starts_where_the_app_says():
    assert Lifecycle(staging=True).readiness is STARTING
    assert Lifecycle(staging=False).readiness is READY and Lifecycle(staging=False).ready


def test_lifecycle_walks_start_ready_drain():
    life = Lifecycle(staging=True)
    assert not life.ready
    life.staged()
    assert life.readiness is READY and life.ready
    assert life.drain() is True                 # the first SIGTERM
    assert life.readiness is DRAINING and not life.ready
    assert life.drain() is False                # the second: the caller stops at once
    life.staged()
    assert life.readiness is DRAINING


def test_drain_during_staging_stays_drained():
    life = Lifecycle(staging=True)
    assert life.drain() is True
    life.staged()                                # staging's finally, after the SIGTERM
    assert life.readiness is DRAINING


def test_reasons_are_what_ready_answers():
    assert STARTING.reason == "startup tier initialization in progress"
    assert DRAINING.reason == "shutting down"


def test_readiness_has_no_setter():
    life = Lifecycle(staging=True)
    with pytest.raises(AttributeError):
        life.readiness = READY      # type: ignore[misc]
    with pytest.raises(AttributeError):
        life.other = 1              # type: ignore[attr-defined]


def test_app_state_is_slotted():
    names = {f.name for f in dataclasses.fields(AppState)}
    assert {"config", "scheduler", "lifecycle", "pictures", "openapi", "staging"} <= names
    assert set(AppState.__slots__) == names
