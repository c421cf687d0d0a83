"""What the scheduler refuses, as its own typed values: nothing here knows HTTP.

Inside scheduling a load decision is a value: the planner's `LoadPlan` or one of its
refusals (`planner.loading.LoadRefusal`), or `WorkersBusy` (the RPC workers a split model
needs are held by models in use). `Residency` decides on those values whether to wait, to
try the RPC workers or to give up, and only a refusal that ends the request leaves
scheduling, raised as one `Refused` subclass carrying what the caller needs to say why: the
model, the planner's refusal, the engine's error, a retry hint.

The HTTP layer gives each its status, in one place (`service.errors.from_refusal`),
applied where requests meet the scheduler: the inference layer for leases and holds, the
app's error handler for the pool and memory routes that call the scheduler directly.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.engines.errors import EngineError
from hypnos.planner.loading import LoadRefusal, NoRoom, OverProcessCap, TooBig

GIB = 2**30


@dataclass(frozen=True)
class WorkersBusy:
    """A split model needs RPC workers that ``busy`` (models in use) hold: like `NoRoom`,
    waiting for their leases to end may cure it."""
    busy: tuple[str, ...]


Refusal = LoadRefusal | WorkersBusy


class Refused(Exception):
    """A lease, hold, move or pool change the scheduler will not do. ``message`` is the
    sentence a client reads; ``retry_after_s``: when retrying may succeed (None: no hint)."""

    def __init__(self, message: str, *, retry_after_s: int | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class UnknownModel(Refused):
    """No model of that id is in the pool (or it was removed while the request waited)."""


class DisabledModel(Refused):
    """The model is configured but switched off."""


class Busy(Refused):
    """Not now: the model's queue is full, it is in use (a move, a disable), another change
    to it runs, or its requests did not drain in time."""


class OverDeadline(Refused):
    """The estimated wait exceeds the request's deadline (``retry_after_s`` is set)."""


class NotServable(Refused):
    """The model cannot be served as configured or as the machine is now: a problem found at
    start (missing files), no RPC backend, RPC workers that do not answer."""


class NotLoaded(Refused):
    """A call on the loaded engine (`Scheduler.hold_engine`) found none once its wait ended:
    the model is not loaded, or a swap the hold waited for unloaded it."""


class LoadRefused(Refused):
    """The planner refused the load: ``refusal`` says why (`TooBig`: no waiting cures it;
    `NoRoom`, `WorkersBusy`: beside the models in use; `OverProcessCap`)."""

    def __init__(self, model_id: str, refusal: Refusal):
        super().__init__(describe(model_id, refusal))
        self.model_id, self.refusal = model_id, refusal


class LoadFailed(Refused):
    """The engine failed to load: ``error`` is what it raised (`EngineUnavailable`: its
    library or build is missing; `WorkerLost`: an RPC worker went away; else a failure)."""

    def __init__(self, model_id: str, error: EngineError):
        super().__init__(f"Loading '{model_id}' failed: {error}")
        self.model_id, self.error = model_id, error


def describe(model_id: str, refusal: Refusal) -> str:
    """The sentence a client reads for ``refusal`` of ``model_id``'s load."""
    if isinstance(refusal, TooBig):
        return (f"The model '{model_id}' does not fit this machine even alone: needs "
                f"{refusal.needed_bytes / GIB:.2f} GiB, tier 1 has "
                f"{refusal.tier1_bytes / GIB:.2f} GiB ({refusal.reason})")
    if isinstance(refusal, NoRoom):
        return (f"The model '{model_id}' needs {refusal.needed_bytes / GIB:.2f} GiB of tier 1 "
                f"and only {refusal.freeable_bytes / GIB:.2f} GiB can be freed beside the "
                "models in use; retry later")
    if isinstance(refusal, OverProcessCap):
        return (f"Loading '{model_id}' would take the process to "
                f"{refusal.projected_bytes / GIB:.2f} GiB, above "
                f"hardware.max_process_memory_bytes ({refusal.cap_bytes / GIB:.2f} GiB)")
    return (f"The model '{model_id}' needs RPC workers that "
            f"{', '.join(repr(b) for b in refusal.busy)} hold while in use; retry later")
