"""What a request holds while it runs (`Lease`), and what making its model resident did
(`LoadOutcome`, returned by `Residency.ensure`, added to the lease by the scheduler).

Both are plain records: a lease is written by the scheduler on the event loop (and its
``prefill_tokens_per_s`` by the inference layer under it); routes and telemetry read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hypnos.engines.protocols import Engine
from hypnos.engines.records import LoadReport
from hypnos.planner.types import Tier
from hypnos.service.scheduling.pool import ModelState


@dataclass(frozen=True)
class LoadOutcome:
    """One promotion into tier 1: the tier the model came from, how long the switch took
    (waiting for the placement lock and the evictions included), the models evicted for it
    in order, and the load's phases (None when another request loaded it meanwhile)."""
    previous_tier: Tier
    switch_ms: float
    evicted: tuple[str, ...] = ()
    phases: LoadReport | None = None


@dataclass
class Lease:
    """What a request holds while it runs, and what its telemetry reports."""
    model: ModelState
    previous_tier: Tier
    tier_switch_ms: float = 0.0
    evicted: list[str] = field(default_factory=list)
    phases: LoadReport | None = None
    queue_ms: float = 0.0
    estimated_wait_ms: float | None = None
    # The prefill speed the request measured (chat), set under the lease by the inference
    # layer; the scheduler keeps it in the model's statistics when the lease ends.
    prefill_tokens_per_s: float | None = None

    @property
    def engine(self) -> Engine:
        """The model's engine, loaded while the lease holds its slot (an unload of a leased
        model first takes every slot)."""
        engine = self.model.engine
        assert engine is not None, f"{self.model.id} has no engine under a lease"
        return engine

    def add(self, outcome: LoadOutcome | None) -> None:
        """Report a promotion made under this lease (None: the model was resident): the last
        promotion's tier, time and phases, every promotion's evictions."""
        if outcome is None:
            return
        self.previous_tier, self.tier_switch_ms = outcome.previous_tier, outcome.switch_ms
        self.evicted.extend(outcome.evicted)
        if outcome.phases is not None:
            self.phases = outcome.phases
