"""The gates of a grouped swap: while one model's load is planned and done, new requests of
the models it waits for or evicts wait at a gate (`Scheduler` passes them before admission),
then queue behind the load.

"Gate" is this idea only (new requests wait at an event); "hold" is the scheduler's other
one (`Scheduler.hold`: keep a model from being evicted).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class SwapGates:
    """The gates one swap closed on some models' new requests (``close``) while it is
    planned and loaded; ``open`` lets them all go when the load is done or failed."""

    def __init__(self, gates: dict[str, asyncio.Event]):
        self._gates = gates
        self._mine: list[str] = []

    def close(self, model_ids: Iterable[str]) -> None:
        for model_id in model_ids:
            if model_id not in self._gates:
                self._gates[model_id] = asyncio.Event()
                self._mine.append(model_id)

    def open(self) -> None:
        for model_id in self._mine:       # their waiting requests queue behind this load
            self._gates.pop(model_id).set()
        self._mine.clear()


@contextmanager
def gated(gates: dict[str, asyncio.Event]) -> Iterator[SwapGates]:
    """Gates closed on new requests (in ``gates``: model id -> the event they wait on) while
    one swap is planned and loaded; all opened on exit."""
    swap = SwapGates(gates)
    try:
        yield swap
    finally:
        swap.open()
