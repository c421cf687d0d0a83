"""Draft weights shared between targets: booked once while several targets hold them.

Targets whose drafters have the same `DraftShape.share_key` (one draft model id) share one
load of the draft's weights in the engine process (``engines.llama.speculative.
shared_weights``). Each target's placement still includes the draft's weights (it is
self-contained: the one left alone holds them), and the sums here take the extra copies
off: for each key held in a place by k targets, (k - 1) x the largest of their draft weight
bookings. Each target's draft KV is its own and always counted.

Pure: plain data in, bytes or an eviction plan out.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from hypnos.planner.eviction import eviction_order
from hypnos.planner.types import EvictionPlan, Placement, ResidentModel


def _extra_copies(pairs: Iterable[tuple[str, int]]) -> int:
    """Sum over keys of (all bookings - the largest): what counting each key once saves."""
    by_key: dict[str, list[int]] = {}
    for key, weights in pairs:
        if key and weights > 0:
            by_key.setdefault(key, []).append(weights)
    return sum(sum(ws) - max(ws) for ws in by_key.values())


def shared_draft_bytes(placements: Iterable[Placement], in_tier1: bool = True) -> int:
    """Bytes ``placements`` book more than once for shared draft weights: in tier 1
    (``in_tier1``), or in host memory (host placements' ``pinned_ram_bytes``)."""
    return _extra_copies((p.draft_share_key, p.draft_weight_bytes) for p in placements
                         if p.draft_in_tier1 == in_tier1)


def net_booked(residents: Iterable[ResidentModel]) -> int:
    """The tier-1 bytes ``residents`` book, each shared draft's weights once."""
    models = list(residents)
    return sum(m.booked_bytes for m in models) - _extra_copies(
        (m.draft_share_key, m.draft_weight_bytes) for m in models)


def added_bytes(placement: Placement, residents: Iterable[ResidentModel]) -> int:
    """What ``placement`` adds to tier 1 beside ``residents``: its booking, less its draft's
    weights when a resident already holds the same draft in tier 1 (never below 0)."""
    booked = placement.booked_tier1_bytes
    key = placement.draft_share_key
    if not key or not placement.draft_in_tier1:
        return booked
    held = max((m.draft_weight_bytes for m in residents if m.draft_share_key == key),
               default=0)
    return max(0, booked - min(held, placement.draft_weight_bytes))


def as_resident_booking(placement: Placement) -> tuple[str, int]:
    """(share key, draft weight bytes) a `ResidentModel` carries for ``placement``: the
    weights count only where they are booked in tier 1."""
    if not placement.draft_in_tier1:
        return "", 0
    return placement.draft_share_key, placement.draft_weight_bytes


def plan_shared_eviction(placement: Placement, tier1_bytes: int,
                         residents: Sequence[ResidentModel]) -> EvictionPlan:
    """`planner.eviction.plan_eviction` with shared draft weights counted once: the shortest
    prefix of `eviction_order` after whose eviction ``placement`` fits in ``tier1_bytes``
    beside the models left (evicting a model whose draft another one keeps frees only its
    KV and the rest of its booking). Without shared drafts it is `plan_eviction`'s answer."""
    order = eviction_order(residents)
    shortfall = 0
    for k in range(len(order) + 1):
        gone = set(order[:k])
        kept = [m for m in residents if m.model_id not in gone]
        shortfall = added_bytes(placement, kept) - (tier1_bytes - net_booked(kept))
        if shortfall <= 0:
            return EvictionPlan(evict=tuple(order[:k]))
    return EvictionPlan(evict=(), fits=False, shortfall_bytes=shortfall)
