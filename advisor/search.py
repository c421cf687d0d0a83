"""Lineup search and scoring: which catalog models and variants serve a set of needs best.

Every candidate is placed with the planner's own ``place()`` against the budgets the server
would derive on the machine (see ``advisor.candidates`` for CPU engines and shapes).

- Score (in billions of parameters): for each need a model does, its parameter count times
  the need's weight (transcription 0.25, speech 0.1, others 1); a model placed partly off the
  GPU (a layer split) counts ``PARTIAL_FACTOR`` of that, one with experts offloaded
  ``EXPERT_OFFLOAD_FACTOR``; when the interactive models (chat, vision, speech, embeddings)
  are resident together (GPU ones fully on the GPU, all within the budgets) the interactive
  part is counted again (``CORESIDENT_BONUS``). Lineups scoring alike (within
  ``ALIKE_FRACTION`` of the best) go to one whose chat model calls tools, then to the newer
  generation: the later release date, averaged over the models weighted by what each
  scores. Then the higher score, then the
  larger weights (the better quantization of the same model), then the first found.
- Entries the pinned engine cannot run yet (``requires_llama_cpp``) are never candidates.
- The "agents" need is chat sized for an agent CLI: its model calls tools and gets at least
  ``AGENT_CONTEXT`` (32,768) tokens per slot in every setting (``advisor.candidates``).
- Settings tried per lineup: the catalog defaults; one slot with an 8k context on the chat
  models (an agents model keeps its agent context); ``moe_offload = "auto"`` on a discrete
  GPU (MoE lineups only). A reduced setting is kept only when it scores strictly better.
- Bounded search: candidates are ranked by what they would score alone; a role that is not
  interactive and whose candidates serve no other requested role does not interact with the
  others, so it keeps only its best candidate; the other roles keep their best few plus the
  smallest, as many as keep the combinations under ``MAX_COMBINATIONS``.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from hypnos.advisor.candidates import (AGENT_MIN_CONTEXT, Candidate, Machine, Settings,
                                       agent_capable, budget_of, make_candidate, place_alone,
                                       place_in, settings_for)
from hypnos.catalog.catalog import NEEDS, Catalog
from hypnos.planner import NoFit, Placement

ROLE_ORDER = ("chat", "agents", "vision", "transcription", "speech", "embeddings", "images",
              "documents", "entities")
ROLE_MODALITY = {
    "chat": "text_generation", "agents": "text_generation", "vision": "vision",
    "transcription": "speech_to_text", "speech": "text_to_speech", "embeddings": "embeddings",
    "images": "image_generation", "documents": "document_conversion",
    "entities": "entity_extraction",
}
NEED_ROLES = {"voice": ("transcription", "chat", "speech")}
# The "agents" role is the chat role with an agent's context (`candidates.AGENT_CONTEXT`) and
# tool calls: its model serves chat too, so it replaces the "chat" role of other needs.
ROLES_SERVED = {"agents": ("agents", "chat")}
ROLE_WEIGHT = {"transcription": 0.25, "speech": 0.1}
INTERACTIVE = frozenset({"chat", "agents", "vision", "speech", "embeddings"})

PARTIAL_FACTOR = 0.25
EXPERT_OFFLOAD_FACTOR = 0.75
CORESIDENT_BONUS = 1.0
# Most role assignments tried (the per-role candidate lists are cut to fit).
MAX_COMBINATIONS = 1024
# Lineups whose scores differ by less than this fraction of the best "score alike".
ALIKE_FRACTION = 0.10


class AdvisorError(ValueError):
    """The request cannot be answered (an unknown need, nothing asked for)."""


class NoLineupFits(AdvisorError):
    """A need cannot be served on the machine at all: no catalog model serves it, or its
    smallest model does not fit the memory even alone."""


@dataclass(frozen=True)
class Chosen:
    """A model of the chosen lineup: the roles it is the choice for, how it runs."""
    cand: Candidate
    roles: tuple[str, ...]
    settings: Settings
    placement: Placement
    reduced: bool

    @property
    def resident_bytes(self) -> int:
        return self.placement.booked_tier1_bytes + self.placement.pinned_ram_bytes


@dataclass(frozen=True)
class Lineup:
    models: tuple[Chosen, ...]
    coresident: bool
    score: float


def expand_needs(needs: list[str]) -> tuple[str, ...]:
    """Needs -> the roles to fill, in ``ROLE_ORDER``. Raises AdvisorError on an unknown need."""
    if not needs:
        raise AdvisorError("no needs given; known needs: " + ", ".join(NEEDS))
    roles: set[str] = set()
    for need in needs:
        if need not in NEEDS:
            raise AdvisorError(f"unknown need {need!r}; known needs: {', '.join(NEEDS)}")
        roles.update(NEED_ROLES.get(need, (need,)))
    if "agents" in roles:
        roles.discard("chat")
    return tuple(r for r in ROLE_ORDER if r in roles)


def served_roles(roles: tuple[str, ...]) -> set[str]:
    """The roles a model chosen for ``roles`` serves (the agents' model serves chat)."""
    return {x for r in roles for x in ROLES_SERVED.get(r, (r,))}


# ----------------------------------------------------------------- evaluating a lineup

def model_factor(m: Chosen) -> float:
    """What fraction of its parameters a model's placement lets it count for."""
    if m.cand.runs_on_cpu:
        return 1.0
    if m.placement.pinned_ram_layers > 0:
        return PARTIAL_FACTOR
    if m.placement.cpu_expert_layers > 0:
        return EXPERT_OFFLOAD_FACTOR
    return 1.0


def score_lineup(models: tuple[Chosen, ...], coresident: bool) -> float:
    """Sum over roles of weight x params x placement factor, plus the co-residency bonus."""
    total = interactive = 0.0
    for m in models:
        factor = model_factor(m)
        for role in m.roles:
            s = ROLE_WEIGHT.get(role, 1.0) * m.cand.params_b * factor
            total += s
            if role in INTERACTIVE:
                interactive += s
    return total + (CORESIDENT_BONUS * interactive if coresident else 0.0)


Item = tuple[Candidate, tuple[str, ...], Settings]


def _place_pool(items: list[Item], free: int, machine: Machine) -> dict[str, Placement] | None:
    """Place ``items`` one after another in ``free`` bytes (MoE models last, so "auto"
    offloads only what the others leave short; larger first otherwise). None unless every
    one is placed with all its layers in its tier."""
    out: dict[str, Placement] = {}
    for cand, _roles, s in sorted(items, key=lambda it: (it[0].moe, -it[0].weights_bytes)):
        p = place_in(cand, s, free, machine)
        if isinstance(p, NoFit) or p.pinned_ram_layers > 0:
            return None
        out[cand.entry.id] = p
        free -= p.booked_tier1_bytes
    return out


def _place_interactive(items: list[Item], machine: Machine) -> tuple[bool, dict[str, Placement]]:
    """Try to place the interactive models together: the tier-1 users within the tier-1
    budget, the CPU-run ones within the tier-2 budget. (co-resident?, placements found)."""
    inter = [it for it in items if INTERACTIVE & set(it[1])]
    placements: dict[str, Placement] = {}
    coresident = True
    for in_tier1 in (True, False):
        pool = [it for it in inter if it[0].uses_tier1 is in_tier1]
        budget = machine.budgets.tier1_bytes if in_tier1 else machine.budgets.tier2_bytes
        placed = _place_pool(pool, budget, machine) if pool else {}
        if placed is None:
            coresident = False
        else:
            placements.update(placed)
    return coresident, placements


def evaluate(assign: dict[str, Candidate], machine: Machine, reduce: bool,
             moe_auto: bool) -> Lineup | None:
    """The lineup ``assign`` (role -> candidate) under one setting level; None when it is
    not valid (one entry in two variants) or a model does not fit alone."""
    groups: dict[str, tuple[Candidate, list[str]]] = {}
    for role, cand in assign.items():
        seen = groups.setdefault(cand.entry.id, (cand, []))
        if seen[0].variant.quant != cand.variant.quant:
            return None
        seen[1].append(role)
    items = [(c, tuple(r), settings_for(c, r, reduce, moe_auto)) for c, r in groups.values()]
    coresident, placements = _place_interactive(items, machine)
    models = []
    for cand, roles, s in items:
        p = placements.get(cand.entry.id) or place_in(cand, s, budget_of(cand, machine), machine)
        if isinstance(p, NoFit):
            return None
        base = settings_for(cand, roles, False, False)
        reduced = (s.slots, s.context_len) != (base.slots, base.context_len)
        models.append(Chosen(cand, roles, s, p, reduced=reduced))
    chosen = tuple(models)
    return Lineup(chosen, coresident, score_lineup(chosen, coresident))


# ----------------------------------------------------------------- the search

def _need_of(role: str, needs: list[str]) -> str:
    return next(n for n in needs if role in NEED_ROLES.get(n, (n,)))


def _agent_check(role: str, cands: list[Candidate]) -> list[Candidate]:
    """For the "agents" role, the candidates an agent CLI can drive (`agent_capable`)."""
    if role != "agents":
        return cands
    fit = [c for c in cands if agent_capable(c.entry)]
    if not fit:
        raise NoLineupFits(f"need 'agents': no catalog chat model calls tools with a "
                           f"trained context of at least {AGENT_MIN_CONTEXT} tokens")
    return fit


def gib(n: int) -> str:
    return f"{n / 1024**3:.2f}"


def fitting_candidates(catalog: Catalog, role: str, needs: list[str],
                       machine: Machine) -> list[tuple[Candidate, Placement]]:
    """Every (entry, variant) serving ``role`` that fits the machine alone, with that
    placement; NoLineupFits naming the need when there is none."""
    modality = ROLE_MODALITY[role]
    cands = [make_candidate(e, v, machine) for e in catalog.entries if modality in e.modalities
             and catalog.unsupported_reason(e) is None for v in e.variants]
    need = _need_of(role, needs)
    what = need if need == role else f"{need} ({role})"
    if not cands:
        raise NoLineupFits(f"need {what!r}: no catalog model serves {modality}")
    cands = _agent_check(role, cands)
    fits, misses = [], []
    for c in cands:
        p = place_alone(c, (role,), machine)
        (misses if isinstance(p, NoFit) else fits).append((c, p))
    if fits:
        return fits
    cand, miss = min(misses, key=lambda cm: (cm[1].needed_bytes - cm[1].free_bytes, cm[0].spec))
    short = miss.needed_bytes - miss.free_bytes
    raise NoLineupFits(
        f"need {what!r} does not fit: its smallest model {cand.spec} needs {gib(miss.needed_bytes)}"
        f" GiB where {gib(miss.free_bytes)} GiB are available ({gib(short)} GiB short)")


def standalone_score(cand: Candidate, p: Placement, role: str) -> float:
    """What ``cand`` would score doing ``role`` alone (the ranking for pruning)."""
    chosen = Chosen(cand, (role,), settings_for(cand, (role,), True, True), p, False)
    return score_lineup((chosen,), coresident=p.pinned_ram_layers == 0)


def release_day(released: str) -> int:
    """A release date ("YYYY-MM-DD" or "YYYY-MM") as a day number; 0 when unknown."""
    import datetime
    parts = [int(x) for x in released.split("-")[:3] if x.isdigit()] if released else []
    if not parts:
        return 0
    year, month, day = (parts + [1, 1])[:3]
    return datetime.date(year, month, day).toordinal()


def lineup_release(lineup: Lineup) -> float:
    """The lineup's generation: its models' release days weighted by what each scores."""
    weights = [(release_day(m.cand.entry.released),
                sum(ROLE_WEIGHT.get(r, 1.0) for r in m.roles) * max(m.cand.params_b, 1e-3))
               for m in lineup.models]
    total = sum(w for _, w in weights)
    return sum(d * w for d, w in weights) / total if total else 0.0


def ranked(fits: list[tuple[Candidate, Placement]], role: str) -> list[Candidate]:
    order = sorted(fits, key=lambda cp: (-standalone_score(cp[0], cp[1], role),
                                         -release_day(cp[0].entry.released),
                                         -cp[0].weights_bytes, cp[0].spec))
    return [c for c, _ in order]


def prune(cands: list[Candidate], k: int) -> list[Candidate]:
    """The first ``k`` of the ranked ``cands`` plus the smallest, as a fallback."""
    keep = cands[:k]
    smallest = min(cands, key=lambda c: (c.weights_bytes, c.spec))
    return keep if smallest in keep else keep + [smallest]


def _independent(role: str, cands: list[Candidate], roles: tuple[str, ...]) -> bool:
    """Not interactive, and no candidate serves another requested role."""
    others = {ROLE_MODALITY[r] for r in roles if r != role}
    return role not in INTERACTIVE and not any(others & set(c.entry.modalities) for c in cands)


def candidate_lists(catalog: Catalog, needs: list[str], roles: tuple[str, ...],
                    machine: Machine) -> list[list[Candidate]]:
    lists = [ranked(fitting_candidates(catalog, r, needs, machine), r) for r in roles]
    linked = [i for i, r in enumerate(roles) if not _independent(r, lists[i], roles)]
    k = 8
    while k > 1 and math.prod(len(prune(lists[i], k)) for i in linked) > MAX_COMBINATIONS:
        k -= 1
    return [prune(c, k) if i in linked else c[:1] for i, c in enumerate(lists)]


def _levels(combo: tuple[Candidate, ...], machine: Machine) -> list[tuple[bool, bool]]:
    levels = [(False, False)]
    if any(c.shape.num_layers > 0 for c in combo):
        levels.append((True, False))
    if machine.discrete and any(c.moe for c in combo):
        levels += [(False, True), (True, True)]
    return levels


def search(catalog: Catalog, needs: list[str], machine: Machine) -> Lineup:
    """The best-scoring lineup for ``needs``. Raises AdvisorError / NoLineupFits."""
    roles = expand_needs(needs)
    lists = candidate_lists(catalog, needs, roles, machine)
    found: list[tuple[tuple, Lineup]] = []
    for combo in itertools.product(*lists):
        assign = dict(zip(roles, combo, strict=True))
        best_here = None
        for reduce, moe_auto in _levels(combo, machine):
            lineup = evaluate(assign, machine, reduce, moe_auto)
            if lineup is None:
                continue
            key = (round(lineup.score, 9), sum(m.cand.weights_bytes for m in lineup.models))
            if best_here is None or key > best_here[0]:
                best_here = (key, lineup)
        if best_here is not None:
            found.append(best_here)
    if not found:
        raise NoLineupFits("no combination of the catalog's models fits the machine")
    return pick_alike(found)


def chat_calls_tools(lineup: Lineup) -> bool:
    """Every model serving chat in the lineup calls tools (what OpenAI clients, agents and
    LangChain ask of a chat model); True when no model serves chat."""
    return all("tools" in m.cand.entry.capabilities for m in lineup.models
               if "chat" in served_roles(m.roles))


def pick_alike(found: list[tuple[tuple, Lineup]]) -> Lineup:
    """Among lineups scoring within ALIKE_FRACTION of the best, one whose chat model calls
    tools; then the newest generation; then the higher (score, weights) key; then the first
    found."""
    top = max(key[0] for key, _ in found)
    alike = [(i, key, lu) for i, (key, lu) in enumerate(found)
             if key[0] >= top * (1.0 - ALIKE_FRACTION)]
    _, _, best = max(alike, key=lambda t: (chat_calls_tools(t[2]),
                                           round(lineup_release(t[2]), 6), t[1], -t[0]))
    return best
