"""Readiness: whether the server admits work, and the one owner of its transitions.

STARTING --staged()--> READY --drain()--> DRAINING; drain() from STARTING too. DRAINING is
final: staging that ends during a drain leaves it DRAINING. While not READY, the routes whose
``@endpoint`` says ``needs_ready`` answer 503 + Retry-After (http/layers.py, one gate) and
``/ready`` answers 503 with the state's ``reason``. Pure: no I/O, no Sanic.
"""
from __future__ import annotations

from enum import Enum


class Readiness(Enum):
    STARTING = "starting"   # the initial tiers are being staged (lifecycle/staging.py)
    READY = "ready"
    DRAINING = "draining"   # SIGTERM: no new work until the process exits (shutdown.py)

    @property
    def reason(self) -> str:
        """What /ready says while not ready (spec section 3)."""
        return REASONS[self]


REASONS = {Readiness.STARTING: "startup tier initialization in progress",
           Readiness.READY: "ready",
           Readiness.DRAINING: "shutting down"}


def after_staging(now: Readiness) -> Readiness:
    """Staging finished (or failed: a model that does not stage is reported, not fatal)."""
    return Readiness.DRAINING if now is Readiness.DRAINING else Readiness.READY


def after_sigterm(now: Readiness) -> Readiness:
    return Readiness.DRAINING


class Lifecycle:
    """Holds the server's `Readiness`; only its methods change it. Event-loop thread only."""
    __slots__ = ("_now",)

    def __init__(self, staging: bool):
        """``staging``: the app stages its initial tiers first (STARTING), else READY."""
        self._now = Readiness.STARTING if staging else Readiness.READY

    @property
    def readiness(self) -> Readiness:
        return self._now

    @property
    def ready(self) -> bool:
        return self._now is Readiness.READY

    def staged(self) -> None:
        self._now = after_staging(self._now)

    def drain(self) -> bool:
        """Enter DRAINING; False when it already was (a second SIGTERM)."""
        first = self._now is not Readiness.DRAINING
        self._now = after_sigterm(self._now)
        return first
