"""Admission (spec section 1): whether a request for a model is queued or refused at once.

Pure decision; the scheduler turns a refusal into its HTTP error (429 model_busy,
503 deadline_unmeetable with Retry-After) and counts the lease of an admitted request.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Admitted:
    """Queue the request; ``estimated_wait_ms`` is what x-hypnos-estimated-wait-ms reports
    (None before the model has a measured service time while busy)."""
    estimated_wait_ms: float | None


@dataclass(frozen=True)
class QueueFull:
    """429 model_busy: ``queued`` requests already wait beyond the slots, the most allowed
    is ``max_queue``."""
    queued: int
    max_queue: int


@dataclass(frozen=True)
class DeadlineMiss:
    """503 deadline_unmeetable: the estimated wait exceeds the deadline; the client may retry
    after ``retry_after_s`` (the estimate in whole seconds, at least 1)."""
    estimated_wait_ms: float
    deadline_ms: float

    @property
    def retry_after_s(self) -> int:
        return max(1, round(self.estimated_wait_ms / 1000))


Admission = Admitted | QueueFull | DeadlineMiss


def implicit_deadline(overload: str, objective_ms: float | None) -> float | None:
    """The deadline of a request that names none: with limits.overload = "shed" the
    profile's objective (``objective_ms``: None without a profile or for one without a
    latency target, e.g. batch); else none."""
    return objective_ms if overload == "shed" else None


def admit(*, leases: int, slots: int, max_queue: int, estimated_wait_ms: float | None,
          deadline_ms: float | None) -> Admission:
    """Admit one more request for a model with ``leases`` admitted requests (queued or
    running) and ``slots`` execution slots.

    Refused with `QueueFull` when max(0, leases - slots) >= ``max_queue``; then with
    `DeadlineMiss` when both the estimate and the deadline are known and the estimate is
    longer. Else `Admitted`, carrying the estimate.
    """
    queued = max(0, leases - slots)
    if queued >= max_queue:
        return QueueFull(queued, max_queue)
    if deadline_ms is not None and estimated_wait_ms is not None and \
            estimated_wait_ms > deadline_ms:
        return DeadlineMiss(estimated_wait_ms, deadline_ms)
    return Admitted(estimated_wait_ms)
