"""Tier budgets: how many bytes the scheduler may book in tier 1 and tier 2 on a machine.

Pure: the caller probes (or simulates) the machine and passes a `Hardware` record in.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.planner.types import (GIB, MIB, Accelerator, Budgets, Hardware, ModelShape,
                                  Placement, Topology)

# Kept free on a discrete GPU for the CUDA context, cuBLAS workspaces and the display.
VRAM_RESERVE_BYTES = 512 * MIB
# Left to the operating system and other programs on a unified-memory (Apple) host.
OS_RESERVE_BYTES = 4 * GIB
# KV parking's cap when the config sets none: this, at most an eighth of the RAM.
KV_PARK_DEFAULT_BYTES = 4 * GIB
# The prompt cache's RAM tier when the config sets none: this, at most a sixteenth of the
# RAM; its disk tier: this.
PROMPT_CACHE_RAM_BYTES = 2 * GIB
PROMPT_CACHE_DISK_BYTES = 4 * GIB
# Metal's recommendedMaxWorkingSetSize is 2/3 of the RAM up to this size and 3/4 above.
METAL_SMALL_RAM_BYTES = 36 * GIB


def metal_working_set(ram_bytes: int) -> int:
    """Metal's default recommended working set on Apple Silicon: 2/3 of the RAM for machines
    with at most 36 GiB, 3/4 above (what ``MTLDevice.recommendedMaxWorkingSetSize`` reports
    without the ``iogpu.wired_limit_mb`` sysctl changed)."""
    if ram_bytes <= METAL_SMALL_RAM_BYTES:
        return ram_bytes * 2 // 3
    return ram_bytes * 3 // 4


def derive_budgets(hw: Hardware) -> Budgets:
    """The tier-1 and tier-2 budgets the scheduler books against on ``hw``.

    - Discrete GPU: tier 1 = VRAM - 512 MiB (``VRAM_RESERVE_BYTES``); tier 2 = half the RAM
      ("warm memory at most half the RAM": the rest stays for the OS, the process itself and
      the page cache that tier-3 loads read through).
    - Unified memory (Apple): one pool. Tier 1 = min(Metal's default working set, RAM - 4 GiB
      OS reserve); tier 2 = what is left after the reserve and tier 1, at most half the RAM.
      ``hw.vram_bytes`` is ignored.
    - CPU only: tier 1 is "engine loaded in process memory" = half the RAM; tier 2 (weights
      locked in RAM, engine not built) = a quarter, so both together leave a quarter to the OS.
    Budgets are never negative.
    """
    ram = max(0, hw.ram_bytes)
    if hw.topology is Topology.UNIFIED:
        tier1 = max(0, min(metal_working_set(ram), ram - OS_RESERVE_BYTES))
        tier2 = min(max(0, ram - OS_RESERVE_BYTES - tier1), ram // 2)
        return Budgets(tier1_bytes=tier1, tier2_bytes=tier2, unified_memory=True)
    if hw.topology is Topology.CPU_ONLY:
        return Budgets(tier1_bytes=ram // 2, tier2_bytes=ram // 4, unified_memory=False)
    tier1 = max(0, hw.vram_bytes - VRAM_RESERVE_BYTES)
    return Budgets(tier1_bytes=tier1, tier2_bytes=ram // 2, unified_memory=False)


def hardware_for(vram_bytes: int | None, ram_bytes: int, unified_memory: bool,
                 *, simulated: bool = True) -> Hardware:
    """A `Hardware` record for a described machine (advisor, ``[hardware.simulate]``):
    unified memory -> Apple Metal; else VRAM > 0 -> an NVIDIA discrete GPU; else CPU only."""
    if unified_memory:
        return Hardware(Accelerator.METAL, Topology.UNIFIED, 0, ram_bytes, simulated=simulated)
    if vram_bytes:
        return Hardware(Accelerator.NVIDIA, Topology.DISCRETE, vram_bytes, ram_bytes,
                        simulated=simulated)
    return Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, ram_bytes, simulated=simulated)


def tier2_keeps_engine(topology: Topology) -> bool:
    """Whether tier 2 keeps a chat model's loaded engine (its weights loaded and repacked, its
    context freed) instead of only pinning its files. Where the engine computes from host
    memory (CPU only, unified memory) the loaded weights already lie in the memory tier 2
    books, so keeping them costs what pinning the file costs and saves reading them in again
    at the promotion. Beside a discrete GPU loaded weights would hold VRAM: tier 2 stays the
    files pinned in host RAM, ready to upload."""
    return topology is not Topology.DISCRETE


@dataclass(frozen=True)
class KeptEngineBooking:
    """The figures of a model whose tier 2 is its kept engine (`tier2_keeps_engine`)."""
    tier2_bytes: int       # while in tier 2: the loaded weights (context and projector freed)
    tier1_bytes: int       # once promoted: the placement, weights and context (tier 2 freed)
    promotion_bytes: int   # what a promotion allocates: the context alone (KV + workspace,
                           # the projector), the weights move from tier 2's booking to tier 1's


def kept_engine_booking(shape: ModelShape, placement: Placement) -> KeptEngineBooking:
    """Hand-checkable bookings of a kept engine: tier 2 = ``shape.weights_bytes``; tier 1 =
    ``placement.booked_tier1_bytes``; a promotion allocates tier 1 minus the weights tier 2
    held (never negative). Whatever tier the model is in, it is booked once."""
    tier1 = placement.booked_tier1_bytes
    return KeptEngineBooking(tier2_bytes=shape.weights_bytes, tier1_bytes=tier1,
                             promotion_bytes=max(0, tier1 - shape.weights_bytes))


def kv_park_cap(configured: int | None, ram_bytes: int) -> int:
    """Host memory parked KV states may hold: ``configured`` (hardware.kv_park_max_bytes) when
    set, else 4 GiB (``KV_PARK_DEFAULT_BYTES``) but at most an eighth of the RAM, so parking
    on by default never takes more than half of what the CPU-only budgets leave the OS."""
    if configured is not None:
        return max(0, configured)
    return max(0, min(KV_PARK_DEFAULT_BYTES, ram_bytes // 8))


def prompt_cache_caps(ram: int | None, disk: int | None, ram_bytes: int) -> tuple[int, int]:
    """(RAM, disk) bytes the prompt cache may hold: ``ram`` (hardware.prompt_cache_ram_bytes)
    when set, else 2 GiB (``PROMPT_CACHE_RAM_BYTES``) but at most a sixteenth of the RAM;
    ``disk`` (hardware.prompt_cache_disk_bytes) when set, else 4 GiB. The RAM part is booked
    in tier 2."""
    ram_cap = max(0, ram) if ram is not None else max(0, min(PROMPT_CACHE_RAM_BYTES,
                                                             ram_bytes // 16))
    disk_cap = max(0, disk) if disk is not None else PROMPT_CACHE_DISK_BYTES
    return ram_cap, disk_cap
