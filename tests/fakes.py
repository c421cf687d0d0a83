"""The one fake `Effects` the tests drive the scheduler with
(hypnos.service.scheduling.effects.Effects; tests/scheduler/test_effects_protocol.py checks it
implements every member). Like the real one it changes no model record: it returns what it
builds and the scheduler assigns it. ``suspend`` keeps the engine in tier 2 as a real
`KeptEngine` (the scheduler asks for it on CPU-only and unified-memory hosts); ``load`` given
it back logs ``("resume", id)`` after ``("load", id)``.

It records every effect of the scheduler in ``log`` (and staging's ``prepare`` calls, with
the thread they ran in, in ``prepared``) and proves "a model was never unloaded while it was
serving": a test adds a model id to ``serving`` while it runs a request, and an unload of it
meanwhile lands in ``violations``. ``engine``: the engine a load installs (a route test's
failing engine); else an idle stand-in. `Gated` holds chosen loads and unloads until a test
lets them go, so a test orders events instead of timing them.
"""
from __future__ import annotations

import asyncio
import threading
import time

from hypnos.engines.records import LoadReport, LoadSpec
from hypnos.service.scheduling.effects import Loaded
from hypnos.service.scheduling.pool import KeptEngine


class IdleEngine:
    """An engine that loads and unloads and does nothing else (the scheduler never calls
    more)."""

    def load(self, spec: LoadSpec) -> LoadReport:
        return LoadReport()

    def unload(self) -> None:
        pass


class FakePinned:
    """What `FakeEffects.pin` returns: the bytes tier 2 books."""

    def __init__(self, nbytes: int):
        self.bytes, self.locked = nbytes, False

    def release(self) -> None:
        pass


class FakeEffects:
    def __init__(self, load_delay: float = 0.0, engine=None):
        self.log: list[tuple[str, str]] = []
        self.prepared: list[tuple[str, int]] = []
        self.load_delay = load_delay
        self.engine = engine
        self.serving: set[str] = set()
        self.violations: list[str] = []
        self.lock = threading.Lock()

    def prepare(self, st) -> bool:
        """Records the model and the thread (kept apart from ``log``, which holds what the
        scheduler did)."""
        with self.lock:
            self.prepared.append((st.id, threading.get_ident()))
        return False

    def load(self, st, placement, kept) -> Loaded:
        time.sleep(self.load_delay)
        with self.lock:
            self.log.append(("load", st.id))
            if kept is not None:
                self.log.append(("resume", st.id))      # only the context was built
        engine = kept or (self.engine if self.engine is not None else IdleEngine())
        return Loaded(engine, LoadReport(load_mode="warm" if kept is not None else "mmap",
                                         total_ms=self.load_delay * 1000))

    def suspend(self, st, engine) -> KeptEngine:
        """Keeps the engine (without its context), booking its weights."""
        self.log.append(("suspend", st.id))
        return KeptEngine(engine, st.weight_bytes)

    def unload(self, st, engine) -> None:
        if st.id in self.serving:
            self.violations.append(st.id)
        self.log.append(("unload", st.id))

    def park(self, st, engine):
        return None

    def restore(self, st, engine, parked) -> tuple[int, float]:
        return 0, 0.0

    def pin(self, st) -> FakePinned:
        self.log.append(("pin", st.id))
        return FakePinned(st.weight_bytes)

    def unpin(self, st, pinned) -> None:
        self.log.append(("unpin", st.id))
        pinned.release()

    def drop_pages(self, st) -> None:
        self.log.append(("drop", st.id))

    def count_eviction(self, st) -> None:
        pass

    def count_load_failure(self, st) -> None:
        pass


class Gated(FakeEffects):
    """`FakeEffects` whose load or unload of a model waits while the gate ``close`` returned
    for it is not set (a threading.Event: the effect runs in a worker thread); ``began``
    returns once that effect has started."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.gates: dict[tuple[str, str], threading.Event] = {}
        self.started: dict[tuple[str, str], threading.Event] = {}

    def close(self, op: str, mid: str) -> threading.Event:
        self.started[op, mid] = threading.Event()
        gate = self.gates[op, mid] = threading.Event()
        return gate

    async def began(self, op: str, mid: str) -> None:
        assert await asyncio.to_thread(self.started[op, mid].wait, 10), (op, mid)

    def _wait(self, op: str, mid: str) -> None:
        if (op, mid) in self.gates:
            self.started[op, mid].set()
            assert self.gates[op, mid].wait(10), (op, mid)

    def load(self, st, placement, kept):
        self._wait("load", st.id)
        return super().load(st, placement, kept)

    def unload(self, st, engine):
        self._wait("unload", st.id)
        super().unload(st, engine)
