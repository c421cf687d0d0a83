"""Runtime state of each configured model: tier, engine, placement, leases and statistics.

Owned by the scheduler and written only on the event loop: the residency fields (engine,
pinned, placement, tier, last_load, booked_vs_real, problem) by `Residency`, from what the
`Effects` return; the counts, statistics and ``kept`` by the scheduler; enabled and cfg by
`PoolChanges`. Routes read it (status, /v1/models) but never change it.
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hypnos.engines.protocols import Engine, SplitsLayers
from hypnos.engines.records import LoadReport
from hypnos.planner.sharing import as_resident_booking
from hypnos.planner.types import ModelShape, Placement, Priority, ResidentModel, Tier
from hypnos.service.config.schema import ModelConfig

RATE_TAU_SECS = 600.0     # requests_per_minute decays over about 10 minutes
DISK_BYTES_PER_S = 3e9    # rough reload speeds used before a load was measured
RAM_BYTES_PER_S = 12e9


@dataclass
class Stats:
    served: int = 0
    rate_score: float = 0.0
    rate_at: float = field(default_factory=time.monotonic)
    service_ms: float | None = None
    load_ms: dict = field(default_factory=dict)     # from-tier -> last measured load ms
    prefill_tps: float | None = None                 # chat: measured prefill tokens/s

    def record_request(self, held_ms: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.rate_score = self.rate_score * math.exp(-(now - self.rate_at) / RATE_TAU_SECS) + 1
        self.rate_at = now
        self.served += 1
        self.service_ms = held_ms if self.service_ms is None else (
            0.8 * self.service_ms + 0.2 * held_ms)

    def requests_per_minute(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        score = self.rate_score * math.exp(-(now - self.rate_at) / RATE_TAU_SECS)
        return score * 60.0 / RATE_TAU_SECS


class Pinned(Protocol):
    """What tier 2 holds for a model: its weight files pinned (``engines.page_cache.
    PinnedWeights``) or its engine kept (`KeptEngine`)."""

    @property
    def bytes(self) -> int:
        """What tier 2 books for it."""
        ...

    @property
    def locked(self) -> bool:
        """The pages are mlocked (False: resident as long as memory allows)."""
        ...

    def release(self) -> None:
        """Free what it holds. Blocks; idempotent."""
        ...


class KeptEngine:
    """Tier 2 where the engine computes from host memory (``planner.tier2_keeps_engine``):
    the engine itself, its context freed and its weights kept, in ``ModelState.pinned``.
    ``bytes`` is what tier 2 books (``planner.kept_engine_booking``); ``locked`` is False
    (the weights are the engine's memory, not an mlock of the file). A promotion ``take``s
    the engine back and builds only its context; ``release`` frees it (eviction to tier 3)."""

    locked = False

    def __init__(self, engine: Engine, nbytes: int):
        self.engine: Engine | None = engine
        self.bytes = nbytes

    def take(self) -> Engine | None:
        engine, self.engine = self.engine, None
        return engine

    def release(self) -> None:
        engine = self.take()
        if engine is not None:
            engine.unload()


@dataclass
class ModelState:
    cfg: ModelConfig
    paths: dict[str, Path]                 # config key -> absolute path
    shape: ModelShape
    tier: Tier = Tier.SSD
    placement: Placement | None = None
    # The built engine while in tier 1: a ChatEngine, Embedder, Transcriber, ... by modality
    # (routes narrow it with the engine Protocols of hypnos.engines.protocols).
    engine: Engine | None = None
    # While in tier 2: the files pinned, or (host memory engines) the engine kept.
    pinned: Pinned | None = None
    enabled: bool = True
    leases: int = 0                        # admitted requests (queued or running)
    # Holds keep the model from eviction without being requests: they never count against
    # max_queue_per_model (a prompt being counted is not queued).
    holds: int = 0
    running: int = 0                       # requests holding an execution slot
    last_used: float = field(default_factory=time.monotonic)
    stats: Stats = field(default_factory=Stats)
    last_load: LoadReport | None = None
    problem: str | None = None             # why it cannot be served (503), when known
    # Held in tier 1 by a client's keep_alive (`Scheduler.keep`): planned as realtime_pinned,
    # so no other model's load evicts it, until the keep_alive runs out.
    kept: bool = False
    # Booked tier-1 bytes against the process's measured memory growth at the last load.
    booked_vs_real: dict | None = None
    slots: asyncio.Semaphore = field(init=False)
    load_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self):
        self.slots = asyncio.Semaphore(self.cfg.slots)
        self.enabled = self.cfg.enabled

    @property
    def id(self) -> str:
        return self.cfg.id

    @property
    def weight_bytes(self) -> int:
        return self.shape.weights_bytes

    @property
    def waiting(self) -> int:
        return self.leases - self.running

    def reload_estimate_ms(self) -> float:
        """Measured reload time from where an eviction would leave it, else from its size."""
        landing = Tier.RAM if self.cfg.keep_warm_in_ram else Tier.SSD
        if landing in self.stats.load_ms:
            return self.stats.load_ms[landing]
        speed = RAM_BYTES_PER_S if landing is Tier.RAM else DISK_BYTES_PER_S
        return 1000.0 * self.weight_bytes / speed

    def estimated_wait_ms(self) -> float | None:
        """Requests ahead beyond the slots × average service time, plus a load when the
        model is not resident. None before the model has served anything while busy."""
        load = 0.0 if self.tier is Tier.GPU else self.reload_estimate_ms()
        beyond = max(0, self.leases - self.cfg.slots + 1)
        if beyond and self.stats.service_ms is None:
            return None
        return load + beyond * (self.stats.service_ms or 0.0)

    def as_resident(self) -> ResidentModel:
        key, draft = as_resident_booking(self.placement) if self.placement else ("", 0)
        return ResidentModel(self.id, self.priority,
                             self.placement.booked_tier1_bytes if self.placement else 0,
                             self.reload_estimate_ms(), self.stats.requests_per_minute(),
                             leased=self.in_use or self.load_lock.locked(),
                             draft_share_key=key, draft_weight_bytes=draft)

    @property
    def lost(self) -> str:
        """Why its engine is lost (an RPC worker of a split model went away); "" when it is
        not, or when nothing is loaded."""
        return self.engine.lost if isinstance(self.engine, SplitsLayers) else ""

    @property
    def in_use(self) -> bool:
        return self.leases > 0 or self.holds > 0

    def idle_seconds(self) -> float:
        return 0.0 if self.in_use else time.monotonic() - self.last_used

    @property
    def priority(self) -> Priority:
        """What eviction plans with: its config's, or realtime_pinned while ``kept``."""
        return Priority.REALTIME_PINNED if self.kept else self.cfg.priority
