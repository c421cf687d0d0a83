"""The advisor: recommend a lineup (models, variants, settings, a config file) for a machine
and a set of needs, using the catalog and the scheduler's own planner (POST /v1/advisor,
``hypnos advise``)."""
from __future__ import annotations

from hypnos.advisor.render import advisor_body
from hypnos.advisor.candidates import Machine
from hypnos.advisor.search import AdvisorError, NoLineupFits, expand_needs, search
from hypnos.catalog.catalog import Catalog
from hypnos.planner import derive_budgets, hardware_for

__all__ = ["AdvisorError", "NoLineupFits", "advise"]


def advise(catalog: Catalog, needs: list[str], *, vram_bytes: int | None, ram_bytes: int,
           unified_memory: bool) -> dict:
    """The POST /v1/advisor body for ``needs`` on the described machine.

    ``vram_bytes`` None or 0 without ``unified_memory`` means a CPU-only machine; on unified
    memory it is ignored. Raises AdvisorError for an unknown need, NoLineupFits (a subclass)
    when a need cannot be served or its smallest model does not fit even alone.
    """
    needs = list(dict.fromkeys(needs))
    expand_needs(needs)  # validate before any work
    hw = hardware_for(vram_bytes, ram_bytes, unified_memory)
    machine = Machine(hw, derive_budgets(hw))
    lineup = search(catalog, needs, machine)
    warnings = []
    if unified_memory and vram_bytes:
        warnings.append("vram_bytes is ignored on unified memory (one pool: ram_bytes)")
    echo = {"vram_bytes": int(vram_bytes or 0), "ram_bytes": ram_bytes,
            "unified_memory": unified_memory}
    return advisor_body(lineup, needs, machine, echo, warnings)
