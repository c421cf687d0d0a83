"""The load decision: where a model goes when a request needs it in tier 1, and what must
leave first.

``plan_load`` composes the steps in order:

1. **Whole**: place the model as if tier 1 were empty. When even that fails, or leaves
   layers in host memory, and RPC workers are given, split it: its first layers in tier 1,
   the rest on the workers (`planner.workers.place_split`; the host-memory placement stays
   when the workers cannot hold the rest). When nothing fits the model does not fit this
   machine at all: `TooBig` (no waiting cures it).
2. **Evict**: free room for that placement by evicting resident models in
   `eviction_order` (leased and realtime_pinned models are never evicted).
3. **Partial**: when evicting every evictable model still leaves too little, place the
   model again in what could be freed (fewer layers on the GPU, the rest in host memory),
   and evict for that smaller placement (not for a split placement: it is already the
   smallest local part that works with the workers). When that fails too: `NoRoom` (the
   leased models are in the way; waiting for them may cure it).
4. **Process cap**: with ``cap`` set (hardware.max_process_memory_bytes), refuse with
   `OverProcessCap` when the process would grow past it: ``rss`` (measured by the caller)
   - what the victims book + what the new placement books.

Pure: no I/O, the process's memory is passed in. The scheduler performs the evictions and
the load, and maps each refusal to its HTTP error (507).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from hypnos.planner.eviction import eviction_order
from hypnos.planner.placement import place
from hypnos.planner.sharing import added_bytes, net_booked, plan_shared_eviction
from hypnos.planner.types import (Budgets, NoFit, Placement, PlacementRequest,
                                  ResidentModel)
from hypnos.planner.workers import WorkerBudget, place_split


@dataclass(frozen=True)
class LoadPlan:
    """Evict ``evict`` (in order), then load with ``placement``; ``partial``: the placement
    is the fallback of step 3 (the whole one did not fit beside the leased models)."""
    placement: Placement
    evict: tuple[str, ...] = ()
    partial: bool = False


@dataclass(frozen=True)
class TooBig:
    """The model does not fit this machine even with tier 1 empty."""
    needed_bytes: int
    tier1_bytes: int
    reason: str


@dataclass(frozen=True)
class NoRoom:
    """It would fit an empty tier 1, but not beside the models that cannot be evicted:
    ``needed_bytes`` (the whole placement's) against ``freeable_bytes`` (free + what
    evicting every evictable model would free)."""
    needed_bytes: int
    freeable_bytes: int


@dataclass(frozen=True)
class OverProcessCap:
    """The load would take the process to ``projected_bytes``, above ``cap_bytes``."""
    projected_bytes: int
    cap_bytes: int


LoadRefusal = TooBig | NoRoom | OverProcessCap


def plan_load(request: PlacementRequest, residents: Sequence[ResidentModel], budgets: Budgets,
              rss: int, cap: int | None,
              workers: Sequence[WorkerBudget] = ()) -> LoadPlan | LoadRefusal:
    """Plan loading ``request.shape`` beside ``residents`` (the other models booking tier 1).

    ``request.tier1_free_bytes`` is ignored: steps 1-3 set it (the whole budget, then what
    can be freed). ``rss``: the process's resident memory now; ``cap``: 0 or None for no cap.
    ``workers``: the RPC workers the model may be split onto when it does not fit alone.
    """
    others = list(residents)
    alone = replace(request, tier1_free_bytes=budgets.tier1_bytes)
    whole = place(alone)
    spills = isinstance(whole, NoFit) or whole.pinned_ram_layers > 0
    if spills and workers:          # workers before layers computed from host memory
        split = place_split(alone, workers)
        if not isinstance(split, NoFit):
            whole = split
    if isinstance(whole, NoFit):
        return TooBig(whole.needed_bytes, budgets.tier1_bytes, whole.reason)
    placement, partial = whole, False
    plan = plan_shared_eviction(whole, budgets.tier1_bytes, others)
    if not plan.fits:
        evictable = set(eviction_order(others))
        stay = [m for m in others if m.model_id not in evictable]
        freeable = budgets.tier1_bytes - net_booked(stay)
        if whole.remote:
            return NoRoom(whole.booked_tier1_bytes, freeable)
        # A draft the staying models hold is not booked again: the fallback may use its room.
        credit = whole.booked_tier1_bytes - added_bytes(whole, stay)
        fallback = place(replace(request, tier1_free_bytes=freeable + credit))
        if isinstance(fallback, NoFit):
            return NoRoom(whole.booked_tier1_bytes, freeable)
        plan = plan_shared_eviction(fallback, budgets.tier1_bytes, others)
        if not plan.fits:
            return NoRoom(whole.booked_tier1_bytes, freeable)
        placement, partial = fallback, True
    if cap:
        kept = [m for m in others if m.model_id not in plan.evict]
        projected = rss - (net_booked(others) - net_booked(kept)) + \
            added_bytes(placement, kept)
        if projected > cap:
            return OverProcessCap(projected, cap)
    return LoadPlan(placement, plan.evict, partial)
