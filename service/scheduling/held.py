"""Requests held by a grouped swap: while one model's load is planned and done, new requests
of the models it waits for or evicts wait at a gate (`Scheduler` passes them before
admission), then queue behind the load.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class HeldRequests:
    """New requests of some models held while another model's swap is planned and loaded
    (``hold``); ``release`` lets them all go when the load is done or failed."""

    def __init__(self, gates: dict[str, asyncio.Event]):
        self._gates = gates
        self._mine: list[str] = []

    def hold(self, model_ids: Iterable[str]) -> None:
        for model_id in model_ids:
            if model_id not in self._gates:
                self._gates[model_id] = asyncio.Event()
                self._mine.append(model_id)

    def release(self) -> None:
        for model_id in self._mine:       # their waiting requests queue behind this load
            self._gates.pop(model_id).set()
        self._mine.clear()


@contextmanager
def holding(gates: dict[str, asyncio.Event]) -> Iterator[HeldRequests]:
    """New requests held (in ``gates``: model id -> the event they wait on) while one swap is
    planned and loaded; released on exit."""
    held = HeldRequests(gates)
    try:
        yield held
    finally:
        held.release()
