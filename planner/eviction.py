"""Eviction: which resident models to demote, in which order, to free tier-1 memory.

Pure decision; must not log. The scheduler performs the demotions.
"""
from __future__ import annotations

from collections.abc import Iterable

from hypnos.planner.types import EvictionPlan, Priority, ResidentModel


def _evictable(m: ResidentModel) -> bool:
    return not m.leased and m.priority is not Priority.REALTIME_PINNED


def eviction_order(resident: Iterable[ResidentModel]) -> list[str]:
    """Ids of the models that may be evicted, first to go first.

    Leased and ``realtime_pinned`` models are never listed. ``low`` goes before ``normal``
    before ``high``; within a priority the model whose loss costs least
    (``reload_estimate_ms x requests_per_minute``) goes first; ties: the one booking more
    bytes first (frees more per eviction), then by id (deterministic).
    """
    candidates = [m for m in resident if _evictable(m)]
    candidates.sort(key=lambda m: (m.priority.rank, m.reload_estimate_ms * m.requests_per_minute,
                                   -m.booked_bytes, m.model_id))
    return [m.model_id for m in candidates]


def plan_eviction(needed_bytes: int, free_bytes: int,
                  resident: Iterable[ResidentModel]) -> EvictionPlan:
    """The shortest prefix of `eviction_order` whose booked bytes, added to ``free_bytes``,
    reach ``needed_bytes``. Nothing to evict when it already fits. When even evicting every
    evictable model is not enough: ``fits=False``, ``evict=()`` (evicting would not help) and
    ``shortfall_bytes`` = what would still be missing after evicting all of them."""
    if needed_bytes <= free_bytes:
        return EvictionPlan()
    models = list(resident)
    booked = {m.model_id: m.booked_bytes for m in models}
    freed = 0
    chosen: list[str] = []
    for model_id in eviction_order(models):
        chosen.append(model_id)
        freed += booked[model_id]
        if free_bytes + freed >= needed_bytes:
            return EvictionPlan(evict=tuple(chosen))
    return EvictionPlan(evict=(), fits=False, shortfall_bytes=needed_bytes - free_bytes - freed)
