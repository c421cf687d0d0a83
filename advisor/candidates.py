"""Candidates: a catalog (entry, variant) as the advisor places it on a described machine.

- Engines that cannot run on the machine's accelerator (``planner.ACCELERATED_ENGINES``: on
  an NVIDIA GPU llama.cpp, faster-whisper, onnxruntime and stable-diffusion.cpp can, as
  ``./run.sh`` installs them there; on Apple Silicon only llama.cpp and
  stable-diffusion.cpp; docling and GLiNER never) take no tier-1 memory on a GPU host
  (discrete or unified): they are booked against the tier-2 budget and reported with
  ``runs_on_cpu``. On a CPU-only host every model runs on the CPU and takes tier 1 (the
  process memory).
- Only ``ggml_llama`` models with catalog layer counts are layered; every other engine is
  placed whole (``shape_from_arch`` with num_layers 0).
- Parameters: the catalog's ``params_b``, else estimated from the weights and the quant.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from hypnos.catalog.catalog import Entry, Variant
from hypnos.planner.context import DEFAULT_CONTEXT_CAP
from hypnos.planner import (Budgets, Hardware, ModelShape, MoeOffload, NoFit, Placement,
                            PlacementRequest, Topology, can_accelerate, place, shape_from_arch)

CHAT_ROLES = frozenset({"chat", "vision", "agents"})
LAYERED_ENGINES = frozenset({"ggml_llama"})
REDUCED_SLOTS = 1
REDUCED_CONTEXT = DEFAULT_CONTEXT_CAP     # the reduced variant: one slot at the default cap
# An agent CLI's turn: Claude Code's first request is about 18,800 tokens (its system prompt
# and tool definitions) and asks for 32,000 output tokens, which the server clamps to
# limits.max_tokens_cap (8192 by default). The chat model of the "agents" need is given a
# context per slot that holds both, rounded up to a power of two, in every setting tried,
# and must call tools and be trained for at least that sum.
AGENT_PROMPT_TOKENS = 18_800
AGENT_OUTPUT_TOKENS = 8_192
AGENT_MIN_CONTEXT = AGENT_PROMPT_TOKENS + AGENT_OUTPUT_TOKENS
AGENT_CONTEXT = 1 << (AGENT_MIN_CONTEXT - 1).bit_length()       # 32768


@dataclass(frozen=True)
class Machine:
    hardware: Hardware
    budgets: Budgets

    @property
    def cpu_only(self) -> bool:
        return self.hardware.topology is Topology.CPU_ONLY

    @property
    def discrete(self) -> bool:
        return self.hardware.topology is Topology.DISCRETE

    @property
    def platform(self) -> str:
        """The catalog's files[].platform of this machine."""
        return "macos-arm64" if self.budgets.unified_memory else "other"


@dataclass(frozen=True)
class Candidate:
    """One (entry, variant) as the search sees it."""
    entry: Entry
    variant: Variant
    shape: ModelShape
    weights_bytes: int
    params_b: float
    runs_on_cpu: bool
    uses_tier1: bool

    @property
    def spec(self) -> str:
        return f"{self.entry.id}:{self.variant.quant}"

    @property
    def moe(self) -> bool:
        return self.shape.expert_bytes_per_layer > 0


@dataclass(frozen=True)
class Settings:
    slots: int
    context_len: int
    moe_offload: MoeOffload


_QUANT_BITS = {"f32": 32, "fp32": 32, "f16": 16, "fp16": 16, "bf16": 16}


def quant_bits(quant: str) -> float:
    """Bits per weight of a quantization name: GGUF block quants (Q4_K_M, IQ3_XS, ...) carry
    about half a bit of scales per weight; f16/bf16/f32, float16, int8 ... are what they say;
    a name without a number counts as 16 bits."""
    q = quant.lower()
    if q in _QUANT_BITS:
        return float(_QUANT_BITS[q])
    m = re.search(r"(\d+)", q)
    bits = float(m.group(1)) if m else 16.0
    return bits + 0.5 if q.startswith(("q", "iq")) else bits


def estimate_params_b(weights_bytes: int, quant: str) -> float:
    """Parameters (billions) from the weights size and the quantization."""
    return weights_bytes * 8 / quant_bits(quant) / 1e9


def _files(variant: Variant, platform: str, role: str | None = None):
    return [f for f in variant.files if f.platform in ("all", platform)
            and (role is None or f.role == role)]


def weights_estimate(entry: Entry, variant: Variant, platform: str) -> int:
    """The variant's bytes on this platform; when a file's size is unknown, at least the
    parameter count x the quantization's bits per weight."""
    files = _files(variant, platform)
    known = sum(f.size or 0 for f in files)
    if any(f.size is None for f in files) and entry.params_b > 0:
        return max(known, int(entry.params_b * 1e9 * quant_bits(variant.quant) / 8))
    return known


def make_candidate(entry: Entry, variant: Variant, machine: Machine) -> Candidate:
    runs_on_cpu = machine.cpu_only or not can_accelerate(entry.engine, machine.hardware)
    total = weights_estimate(entry, variant, machine.platform)
    arch = entry.arch
    if entry.engine in LAYERED_ENGINES and arch.num_layers > 0:
        projector = sum(f.size or 0 for f in _files(variant, machine.platform, "aux"))
        shape = shape_from_arch(total - projector, num_layers=arch.num_layers,
                                embedding_length=arch.embedding_length,
                                head_count_kv=arch.head_count_kv, head_dim=arch.head_dim,
                                context_length=arch.context_length,
                                expert_fraction=arch.expert_fraction,
                                projector_bytes=projector, gpu_capable=not runs_on_cpu)
    else:
        shape = shape_from_arch(total, num_layers=0, embedding_length=0, head_count_kv=0,
                                head_dim=0, context_length=arch.context_length,
                                gpu_capable=not runs_on_cpu)
    params = entry.params_b or estimate_params_b(total, variant.quant)
    return Candidate(entry, variant, shape, total, params, runs_on_cpu,
                     uses_tier1=machine.cpu_only or not runs_on_cpu)


def agent_capable(entry: Entry) -> bool:
    """Whether ``entry`` can be an agent CLI's model: it calls tools and is trained for an
    agent's first turn (`AGENT_MIN_CONTEXT`)."""
    return "tools" in entry.capabilities and entry.arch.context_length >= AGENT_MIN_CONTEXT


def settings_for(cand: Candidate, roles, reduce: bool, moe_auto: bool) -> Settings:
    """The catalog defaults; ``reduce``: one slot at `REDUCED_CONTEXT` for a chat model; a
    model in the "agents" role never below `AGENT_CONTEXT` per slot (or its trained one)."""
    d = cand.entry.defaults
    trained = cand.entry.arch.context_length
    ctx = int(d.get("context_len") or (min(trained, DEFAULT_CONTEXT_CAP) if trained else 0))
    slots = int(d.get("slots", 1))
    layered = cand.shape.num_layers > 0
    floor = min(AGENT_CONTEXT, trained or AGENT_CONTEXT) if "agents" in roles else 0
    if reduce and layered and CHAT_ROLES & set(roles):
        slots = REDUCED_SLOTS
        ctx = min(ctx or REDUCED_CONTEXT, REDUCED_CONTEXT)
    if ctx and ctx // max(1, slots) < floor:
        ctx = floor * max(1, slots)     # context_len is across all slots
    moe = MoeOffload.AUTO if moe_auto and cand.moe else MoeOffload(d.get("moe_offload", "off"))
    return Settings(slots=slots, context_len=ctx if layered else 0, moe_offload=moe)


def place_in(cand: Candidate, s: Settings, free: int, machine: Machine) -> Placement | NoFit:
    """Place ``cand`` in ``free`` bytes; a layer split whose host part exceeds the tier-2
    budget is a NoFit too."""
    req = PlacementRequest(shape=cand.shape, tier1_free_bytes=free, slots=s.slots,
                           context_len=s.context_len, moe_offload=s.moe_offload,
                           min_gpu_layer_ratio=float(cand.entry.defaults.get(
                               "min_gpu_layer_ratio", 0.0)),
                           unified_memory=machine.budgets.unified_memory)
    p = place(req)
    if isinstance(p, Placement) and cand.uses_tier1 and \
            p.pinned_ram_bytes > machine.budgets.tier2_bytes:
        return NoFit(reason=f"{p.pinned_ram_bytes} bytes would have to stay in host memory, "
                            f"{machine.budgets.tier2_bytes} budgeted",
                     needed_bytes=p.pinned_ram_bytes, free_bytes=machine.budgets.tier2_bytes)
    return p


def budget_of(cand: Candidate, machine: Machine) -> int:
    return machine.budgets.tier1_bytes if cand.uses_tier1 else machine.budgets.tier2_bytes


def place_alone(cand: Candidate, roles, machine: Machine) -> Placement | NoFit:
    """The most forgiving placement of ``cand`` alone (reduced chat settings, MoE auto)."""
    s = settings_for(cand, roles, reduce=True, moe_auto=machine.discrete)
    return place_in(cand, s, budget_of(cand, machine), machine)

