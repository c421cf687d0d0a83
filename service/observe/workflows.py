"""Declared multi-step workflows (``x-hypnos-workflow: name/id``, spec section 1): their
end-to-end time, first start to last byte, as percentiles per name."""
from __future__ import annotations

import time
from dataclasses import dataclass

from hypnos.service.observe.telemetry import LatencyBook

IDLE_CLOSE_SECS = 30.0


@dataclass
class _Open:
    started: float
    last_end: float


class Workflows:
    def __init__(self, clock=time.monotonic):
        self.book = LatencyBook()
        self.open: dict[tuple[str, str], _Open] = {}
        self.clock = clock

    @staticmethod
    def parse(header: str | None) -> tuple[str, str] | None:
        if not header or "/" not in header:
            return None
        name, _, wid = header.strip().partition("/")
        return (name, wid) if name and wid else None

    def begin(self, key: tuple[str, str], started: float) -> None:
        self.expire()
        if key not in self.open:
            self.open[key] = _Open(started, started)

    def end(self, key: tuple[str, str], finished: float, close: bool) -> None:
        wf = self.open.get(key)
        if wf is None:
            return
        wf.last_end = max(wf.last_end, finished)
        if close:
            self._close(key)

    def _close(self, key) -> None:
        wf = self.open.pop(key)
        self.book.record(key[0], (wf.last_end - wf.started) * 1000)

    def expire(self) -> None:
        """A workflow with no request for 30 s is closed at its last byte."""
        now = self.clock()
        for key in [k for k, wf in self.open.items() if now - wf.last_end > IDLE_CLOSE_SECS]:
            self._close(key)

    def snapshot(self) -> dict:
        self.expire()
        return self.book.snapshot()
