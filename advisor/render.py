"""What the advisor answers for a chosen lineup: starting tiers and priorities, warnings, the
POST /v1/advisor body and a complete config file.

Starting tiers: the interactive models that take tier-1 memory start in tier 1 when they fit
there together (else only the first of them, the chat model); every other model starts where
its catalog defaults say, but never above tier 2 (it enters tier 1 on its first request).
Warm memory: when tier 2 cannot hold every model's weights, ``keep_warm_in_ram`` is turned
off for the non-interactive models first (lowest priority, largest first), which then start
on disk.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.advisor.candidates import Machine
from hypnos.advisor.search import INTERACTIVE, NEED_ROLES, Chosen, Lineup, gib, served_roles
from hypnos.catalog.blocks import block_fields, render_blocks
from hypnos.planner import Priority, Tier

LOAD_BYTES_PER_SEC = 3e9
ROLE_PRIORITY = {"chat": Priority.HIGH, "agents": Priority.HIGH, "vision": Priority.HIGH,
                 "documents": Priority.LOW, "entities": Priority.LOW}


@dataclass(frozen=True)
class Staging:
    initial_tier: Tier
    priority: Priority
    keep_warm_in_ram: bool


def _priority(m: Chosen) -> Priority:
    if "priority" in m.cand.entry.defaults:
        return Priority(m.cand.entry.defaults["priority"])
    ranks = [ROLE_PRIORITY.get(r, Priority.NORMAL) for r in m.roles]
    return max(ranks, key=lambda p: p.rank)


def _default_tier(m: Chosen) -> Tier:
    default = m.cand.entry.defaults.get("initial_tier")
    if default:
        tier = Tier(default)
        return Tier.RAM if tier is Tier.GPU else tier
    return Tier.RAM if m.cand.weights_bytes else Tier.SSD


def plan_staging(lineup: Lineup, machine: Machine) -> tuple[dict[str, Staging], list[str]]:
    """Starting tier, priority and keep-warm of every model, plus the warnings it causes."""
    tiers: dict[str, Tier] = {}
    first_interactive = True
    for m in lineup.models:
        interactive = bool(INTERACTIVE & set(m.roles))
        if interactive and m.cand.uses_tier1:
            tiers[m.cand.entry.id] = Tier.GPU if lineup.coresident or first_interactive \
                else Tier.RAM
            first_interactive = False
        else:
            tiers[m.cand.entry.id] = _default_tier(m)
    cold = _cold_models(lineup, machine)
    warnings = []
    if cold:
        total = sum(m.cand.weights_bytes for m in lineup.models)
        warnings.append(f"warm memory (tier 2, {gib(machine.budgets.tier2_bytes)} GiB) cannot "
                        f"hold every model's weights ({gib(total)} GiB): not kept warm in RAM: "
                        f"{', '.join(cold)} (a demotion drops them to disk)")
    out = {}
    for m in lineup.models:
        mid = m.cand.entry.id
        tier = Tier.SSD if mid in cold and tiers[mid] is Tier.RAM else tiers[mid]
        out[mid] = Staging(tier, _priority(m), mid not in cold)
    return out, warnings


def _cold_models(lineup: Lineup, machine: Machine) -> list[str]:
    """Models not kept warm, so that the warm weights fit the tier-2 budget: dropped in order
    (non-interactive first, lowest priority, largest first) until they fit, then any dropped
    one that fits back in is taken back (latest dropped first)."""
    excess = sum(m.cand.weights_bytes for m in lineup.models) - machine.budgets.tier2_bytes
    order = sorted(lineup.models, key=lambda m: (bool(INTERACTIVE & set(m.roles)),
                                                 _priority(m).rank, -m.cand.weights_bytes))
    cold: list[Chosen] = []
    for m in order:
        if excess <= 0:
            break
        if m.cand.weights_bytes:
            cold.append(m)
            excess -= m.cand.weights_bytes
    for m in reversed(cold[:-1]):
        if excess + m.cand.weights_bytes <= 0:
            cold.remove(m)
            excess += m.cand.weights_bytes
    return [m.cand.entry.id for m in cold]


def lineup_warnings(lineup: Lineup, machine: Machine) -> list[str]:
    """What a person should know about the chosen placements."""
    out = []
    for m in lineup.models:
        p, mid, n = m.placement, m.cand.entry.id, m.cand.shape.num_layers
        if m.cand.runs_on_cpu:
            pass
        elif p.pinned_ram_layers:
            out.append(f"{mid}: only {p.gpu_layers} of {n} layers fit the GPU; the other "
                       f"{p.pinned_ram_layers} run from RAM on the CPU (much slower)")
        elif p.cpu_expert_layers:
            out.append(f"{mid}: the experts of {p.cpu_expert_layers} of {n} layers run on the "
                       f"CPU (moe_offload = \"auto\") so that it fits")
        if m.reduced:
            out.append(f"{mid}: {m.settings.slots} slot and a context of "
                       f"{m.settings.context_len} tokens so that the interactive models fit "
                       f"together")
        if any(f.size is None for f in m.cand.variant.files):
            out.append(f"{m.cand.spec}: some file sizes are unknown; its footprint is "
                       f"estimated from its parameter count")
    inter = [m.cand.entry.id for m in lineup.models if INTERACTIVE & set(m.roles)]
    if not lineup.coresident:
        out.append(f"the interactive models ({', '.join(inter)}) do not fit in memory "
                   f"together: switching between them reloads weights")
    return out


def _serves(m: Chosen, needs: list[str]) -> list[str]:
    out = []
    for need in needs:
        if need not in out and set(NEED_ROLES.get(need, (need,))) & served_roles(m.roles):
            out.append(need)
    return out


def model_body(m: Chosen, needs: list[str], st: Staging) -> dict:
    """One entry of the body's ``models``."""
    p, cand = m.placement, m.cand
    secs = round(cand.weights_bytes / LOAD_BYTES_PER_SEC, 2)
    return {
        "id": cand.entry.id, "name": cand.entry.name, "quant": cand.variant.quant,
        "serves": _serves(m, needs), "weights_bytes": cand.weights_bytes,
        "resident_bytes": m.resident_bytes, "runs_on_cpu": cand.runs_on_cpu,
        "gpu_layers": 0 if cand.runs_on_cpu else p.gpu_layers,
        "num_layers": cand.shape.num_layers, "cpu_expert_layers": p.cpu_expert_layers,
        "context_len": p.allocated_context_len, "slots": m.settings.slots,
        "initial_tier": str(st.initial_tier), "priority": str(st.priority),
        "keep_warm_in_ram": st.keep_warm_in_ram, "moe_offload": str(m.settings.moe_offload),
        "load_secs_cold": secs, "load_secs_warm": secs,
    }


def interactive_bytes(lineup: Lineup) -> int:
    return sum(m.resident_bytes for m in lineup.models if INTERACTIVE & set(m.roles))


def model_block(m: Chosen, st: Staging) -> dict:
    """The [[models]] block: the catalog's block with the advisor's choices on top."""
    block = block_fields(m.cand.entry, m.cand.variant)
    block.update(priority=str(st.priority), initial_tier=str(st.initial_tier),
                 keep_warm_in_ram=st.keep_warm_in_ram)
    if m.cand.shape.num_layers:
        block.update(slots=m.settings.slots, context_len=m.placement.allocated_context_len,
                     moe_offload=str(m.settings.moe_offload))
    return block


def config_text(lineup: Lineup, needs: list[str], machine: Machine,
                staging: dict[str, Staging]) -> str:
    """A complete config file: header, config_version, models_dir, [server], [[models]]."""
    b, hw = machine.budgets, machine.hardware
    kind = ("unified memory" if b.unified_memory else
            "CPU only" if machine.cpu_only else f"{gib(hw.vram_bytes)} GiB VRAM")
    head = [
        f"# Generated by the Hypnos advisor for needs: {', '.join(needs)}.",
        f"# Machine: {kind}, {gib(hw.ram_bytes)} GiB RAM; budgets: tier 1 "
        f"{gib(b.tier1_bytes)} GiB, tier 2 {gib(b.tier2_bytes)} GiB.",
        "# Fetch the weights with ./run.sh models <spec>: "
        + " ".join(m.cand.spec for m in lineup.models),
        "config_version = 1",
        'models_dir = "models"',
        "",
        "[server]",
        'host = "127.0.0.1"',
        "port = 9999",
        "",
    ]
    parts = ["\n".join(head)]
    for m in lineup.models:
        e, v = m.cand.entry, m.cand.variant
        comment = (f"{e.name} ({v.quant}), {e.publisher}, license {e.license}: serves "
                   f"{', '.join(_serves(m, needs))}.")
        parts.append(render_blocks([model_block(m, staging[e.id])], comment))
    return "\n".join(parts)


def advisor_body(lineup: Lineup, needs: list[str], machine: Machine,
                 machine_echo: dict, extra_warnings: list[str]) -> dict:
    """The POST /v1/advisor response body."""
    staging, warm_warnings = plan_staging(lineup, machine)
    b = machine.budgets
    return {
        "machine": machine_echo,
        "budgets": {"tier1_bytes": b.tier1_bytes, "tier2_bytes": b.tier2_bytes,
                    "unified_memory": b.unified_memory},
        "models": [model_body(m, needs, staging[m.cand.entry.id]) for m in lineup.models],
        "interactive_coresident": lineup.coresident,
        "interactive_bytes": interactive_bytes(lineup),
        "warnings": extra_warnings + lineup_warnings(lineup, machine) + warm_warnings,
        "specs": [m.cand.spec for m in lineup.models],
        "config": config_text(lineup, needs, machine, staging),
    }
