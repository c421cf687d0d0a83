"""Tier budgets: how many bytes the scheduler may book in tier 1 and tier 2 on a machine.

Pure: the caller probes (or simulates) the machine and passes a `Hardware` record in.
"""
from __future__ import annotations

from hypnos.planner.types import GIB, MIB, Accelerator, Budgets, Hardware, Topology

# Kept free on a discrete GPU for the CUDA context, cuBLAS workspaces and the display.
VRAM_RESERVE_BYTES = 512 * MIB
# Left to the operating system and other programs on a unified-memory (Apple) host.
OS_RESERVE_BYTES = 4 * GIB
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
