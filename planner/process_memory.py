"""The process memory the bookings do not cover, and what the planner may then hand out.

The planner books each model's weights, KV cache and workspace; the process also holds the
interpreter, the engines' libraries and whatever the allocator keeps (about 0.5-1 GiB with
the default lineup: bench/README.md, soak.py). Where the engines compute from host memory
(CPU only, unified memory) that memory comes out of the same RAM tier 1 is booked in, so the
planner takes it off tier 1 before placing anything, as ``tier1_vram_unaccounted_bytes`` is
for a GPU's VRAM.

Pure: the caller measures the footprint (RSS) and passes the placements in.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from hypnos.planner.sharing import shared_draft_bytes
from hypnos.planner.types import Budgets, Hardware, Placement, Topology


@dataclass(frozen=True)
class ProcessMemory:
    """``footprint_bytes``: the process's resident memory, measured; ``booked_bytes``: the
    part of the bookings that lives in it (see `process_memory`)."""
    footprint_bytes: int
    booked_bytes: int

    @property
    def unbooked_bytes(self) -> int:
        """Resident memory no booking covers (0 when the bookings exceed the footprint)."""
        return max(0, self.footprint_bytes - self.booked_bytes)


def process_memory(footprint: int, topology: Topology, tier1: Iterable[Placement],
                   tier2_bytes: int, parked_bytes: int = 0) -> ProcessMemory:
    """What of the bookings lives in this process's memory: tier 2 (weights kept or pinned
    in host RAM), the parked KV states (``parked_bytes``, under their own cap), each tier-1
    placement's host part (``pinned_ram_bytes``), and on a host computing from host memory
    (not `Topology.DISCRETE`) the tier-1 bookings themselves. A model split across RPC
    workers (``remote``) runs in a child process of its own: none of its bookings live here.
    Draft weights several placements share (`planner.sharing`) count once."""
    host = tier2_bytes + parked_bytes
    local = [p for p in tier1 if not p.remote]
    for p in local:
        host += p.pinned_ram_bytes
        if topology is not Topology.DISCRETE:
            host += p.booked_tier1_bytes
    host -= shared_draft_bytes(local, in_tier1=False)
    if topology is not Topology.DISCRETE:
        host -= shared_draft_bytes(local)
    return ProcessMemory(footprint, host)


def tier1_unbooked(hw: Hardware, memory: ProcessMemory) -> int:
    """The unbooked process memory the planner takes off tier 1: all of it where tier 1 is
    this machine's host memory (CPU only, unified memory); 0 beside a discrete GPU (tier 1 is
    VRAM) and on a simulated machine (its budgets describe another machine, while the
    process measured is this one's)."""
    if hw.simulated or hw.topology is Topology.DISCRETE:
        return 0
    return memory.unbooked_bytes


def usable_budgets(budgets: Budgets, unbooked: int) -> Budgets:
    """``budgets`` with ``unbooked`` bytes taken off tier 1 (never below 0): what a load is
    planned against (`planner.loading.plan_load`)."""
    return replace(budgets, tier1_bytes=max(0, budgets.tier1_bytes - max(0, unbooked)))


def over_process_cap(footprint: int, growth: int, cap: int | None) -> bool:
    """Whether growing a process of ``footprint`` bytes (measured) by ``growth`` takes it
    past hardware.max_process_memory_bytes (``cap``; 0 or None: no cap)."""
    return cap is not None and cap > 0 and footprint + growth > cap
