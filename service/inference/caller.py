"""`Caller`: what the inference layer needs of the request it serves and of the app serving
it, passed in by the route: the scheduler, the limits, the metrics, the request's record and
its deadline. Nothing under inference/ reads the app state or a Sanic request; the route
builds a `Caller` from both (`http.caller.caller_of`).
"""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.service.config.schema import LimitsConfig
from hypnos.service.observe.metrics import Metrics
from hypnos.service.observe.record import RequestRecord
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.wire.body import parse_deadline


@dataclass(frozen=True, slots=True)
class Caller:
    sched: Scheduler
    limits: LimitsConfig            # config.limits when the request came
    metrics: Metrics
    record: RequestRecord           # the request's record (observe/record.py)
    deadline_header: str | None = None  # x-hypnos-deadline-ms as sent

    @property
    def deadline_ms(self) -> float | None:
        """The deadline, read where the lease needs it (a 400 when it is not a number)."""
        return parse_deadline(self.deadline_header)
