"""Plain data the planner takes and gives. Frozen dataclasses, no I/O.

The catalog, the config loader and the engines convert their own records into these
types; nothing here knows about files, TOML or HTTP.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from hypnos.planner.context import FALLBACK_CONTEXT

GIB = 1024**3
MIB = 1024**2
#: Context checkpoints one llama.cpp slot keeps at most (``engines.llama.checkpoints``): what
#: ``ModelShape.checkpoint_bytes`` is booked for, per slot.
CHECKPOINTS_PER_SLOT = 8


class Tier(StrEnum):
    GPU = "tier1_gpu_vram"
    RAM = "tier2_pinned_ram"
    SSD = "tier3_nvme_ssd"

    @property
    def rank(self) -> int:
        """1 for the fastest tier, 3 for disk."""
        return {Tier.GPU: 1, Tier.RAM: 2, Tier.SSD: 3}[self]


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    REALTIME_PINNED = "realtime_pinned"

    @property
    def rank(self) -> int:
        return {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2,
                Priority.REALTIME_PINNED: 3}[self]


class MoeOffload(StrEnum):
    OFF = "off"
    AUTO = "auto"
    ON = "on"


class Accelerator(StrEnum):
    NVIDIA = "NvidiaCuda"
    METAL = "AppleMetal"
    CPU = "Cpu"


class Topology(StrEnum):
    DISCRETE = "DiscretePcie"
    UNIFIED = "UnifiedMemory"
    CPU_ONLY = "CpuOnly"


@dataclass(frozen=True)
class Hardware:
    """What the machine is (probed outside the planner, or simulated).

    vram_bytes is 0 on a CPU-only host; on unified memory it is ignored and ram_bytes is
    the shared pool. ram_bytes is the usable host memory (the cgroup limit when lower than
    the physical memory).
    """

    accelerator: Accelerator
    topology: Topology
    vram_bytes: int
    ram_bytes: int
    device_name: str = ""
    simulated: bool = False

    @property
    def unified(self) -> bool:
        return self.topology is Topology.UNIFIED


@dataclass(frozen=True)
class Budgets:
    """Bytes the scheduler may book in tier 1 and tier 2 on a machine."""

    tier1_bytes: int
    tier2_bytes: int
    unified_memory: bool


@dataclass(frozen=True)
class DraftShape:
    """The drafter speculative decoding runs beside a target, booked with it.

    ``kind`` "draft": a draft model (``model_id``: its configured id; targets naming the same
    id share one load of its weights, `planner.sharing`). ``kind`` "mtp": MTP heads
    (``model_id`` "mtp"; never shared), ``in_target`` when they are blocks of the target's own
    GGUF (their weights are already in the target's ``weights_bytes``: booked there, not
    again), else a separate MTP file whose tensors are ``weights_bytes``.
    ``kv_bytes_per_token``: the drafter's own KV per token of the target's context (a draft
    model's context mirrors the target's sequences; an MTP head keeps one block's KV).
    """

    model_id: str
    weights_bytes: int
    kv_bytes_per_token: int
    kind: str = "draft"
    in_target: bool = False

    @property
    def booked_weights_bytes(self) -> int:
        """The weights this drafter adds to its target's booking."""
        return 0 if self.in_target else self.weights_bytes

    @property
    def share_key(self) -> str:
        """Targets with the same non-empty key share the drafter's weights."""
        return self.model_id if self.kind == "draft" else ""


@dataclass(frozen=True)
class ModelShape:
    """What placement needs to know about one model.

    For a layered model (llama.cpp) the weights split into ``num_layers`` repeating blocks
    of ``layer_bytes`` each plus ``non_layer_bytes`` (embeddings, output head); of each
    block, ``expert_bytes_per_layer`` are Mixture-of-Experts expert tensors (0 when dense).
    ``kv_bytes_per_token`` covers every layer (K and V, f16). A model with num_layers == 0
    (whisper, ONNX, docling, ...) is placed whole: weights_bytes + workspace_bytes.
    ``draft``: the speculative drafter placed with it (its weights and its own KV), if any.
    ``checkpoint_bytes``: one context checkpoint of one slot (llama.cpp's partial sequence
    state: recurrent layers' state, sliding-window cells; 0 for a model that takes none),
    booked with the KV for ``CHECKPOINTS_PER_SLOT`` per slot (`checkpoints_booked`).
    """

    weights_bytes: int
    num_layers: int = 0
    layer_bytes: int = 0
    non_layer_bytes: int = 0
    expert_bytes_per_layer: int = 0
    kv_bytes_per_token: int = 0
    workspace_bytes: int = 0
    projector_bytes: int = 0
    max_context_len: int = 0
    gpu_capable: bool = True
    draft: DraftShape | None = None
    checkpoint_bytes: int = 0

    @property
    def expert_bytes(self) -> int:
        return self.expert_bytes_per_layer * self.num_layers

    def checkpoints_booked(self, slots: int) -> int:
        """The bytes ``slots`` slots' context checkpoints take at most."""
        return max(1, slots) * CHECKPOINTS_PER_SLOT * self.checkpoint_bytes


@dataclass(frozen=True)
class PlacementRequest:
    """One model to place, with the memory free for it right now."""

    shape: ModelShape
    tier1_free_bytes: int
    slots: int = 1
    context_len: int = FALLBACK_CONTEXT
    moe_offload: MoeOffload = MoeOffload.OFF
    min_gpu_layer_ratio: float = 0.0
    unified_memory: bool = False
    # Tier 1 is a discrete GPU's VRAM (not the process memory of a CPU-only host, nor the
    # shared pool of unified memory): a shape that cannot use the GPU is then placed in host
    # memory and books nothing in tier 1.
    discrete_gpu: bool = False


@dataclass(frozen=True)
class RemoteShare:
    """The layers of a split placement on one RPC worker (llama.cpp's ``rpc-server``).

    Layers ``first_layer`` .. ``first_layer + layers - 1``; ``output``: it also holds the
    output head (llama.cpp puts the head on the device of the last layers). ``bytes`` is
    what the placement books on the worker: those layers' weights and KV cache, a compute
    workspace, and the head when it holds it."""

    endpoint: str
    first_layer: int
    layers: int
    bytes: int
    output: bool = False

    def to_wire(self) -> dict:
        return {"endpoint": self.endpoint, "first_layer": self.first_layer,
                "layers": self.layers, "booked_bytes": self.bytes, "output_head": self.output}


@dataclass(frozen=True)
class Placement:
    """The spec's LayerPlacementPlan (appendix), plus what the planner booked in all.

    ``booked_tier1_bytes`` = vram_weight_bytes + vram_kv_and_workspace_bytes: what the
    scheduler charges against the tier-1 budget while the model is resident.
    """

    primary_tier: Tier
    gpu_layers: int = 0
    pinned_ram_layers: int = 0
    ssd_layers: int = 0
    vram_weight_bytes: int = 0
    vram_kv_and_workspace_bytes: int = 0
    pinned_ram_bytes: int = 0
    allocated_context_len: int = 0
    cpu_expert_layers: int = 0
    # Where the forward passes run: "cuda", "metal" or "cpu" ("" until the scheduler, which
    # knows the machine, fills it in). The planner sets "cpu" for a host placement.
    device: str = ""
    # A split placement: the last layers on RPC workers (``planner.workers``), after the
    # ``gpu_layers`` tier 1 holds. Empty for a placement on this machine alone.
    remote: tuple[RemoteShare, ...] = ()
    # The speculative drafter placed with the model (``ModelShape.draft``): its id ("" for
    # none; "mtp" for MTP heads), the weights and KV bytes this placement books for it (inside the
    # figures above: tier 1's where the model's GPU layers are, ``pinned_ram_bytes`` for a
    # host placement: ``draft_in_tier1`` says which), and its sharing key.
    draft_id: str = ""
    draft_weight_bytes: int = 0
    draft_kv_bytes: int = 0
    draft_in_tier1: bool = False
    draft_share_key: str = ""

    @property
    def remote_layers(self) -> int:
        return sum(share.layers for share in self.remote)

    @property
    def on_host(self) -> bool:
        """Every forward pass runs on the host CPU (nothing on a GPU)."""
        return self.device == "cpu"

    @property
    def booked_tier1_bytes(self) -> int:
        return self.vram_weight_bytes + self.vram_kv_and_workspace_bytes

    def to_wire(self) -> dict:
        return {
            "primary_tier": str(self.primary_tier),
            "gpu_layers": self.gpu_layers,
            "pinned_ram_layers": self.pinned_ram_layers,
            "ssd_layers": self.ssd_layers,
            "vram_weight_bytes": self.vram_weight_bytes,
            "vram_kv_and_workspace_bytes": self.vram_kv_and_workspace_bytes,
            "pinned_ram_bytes": self.pinned_ram_bytes,
            "allocated_context_len": self.allocated_context_len,
            "cpu_expert_layers": self.cpu_expert_layers,
            **({"device": self.device} if self.device else {}),
            **({"rpc_workers": [share.to_wire() for share in self.remote]}
               if self.remote else {}),
            **({"draft_weight_bytes": self.draft_weight_bytes,
                "draft_kv_bytes": self.draft_kv_bytes} if self.has_draft else {}),
        }

    @property
    def has_draft(self) -> bool:
        return bool(self.draft_id)


@dataclass(frozen=True)
class NoFit:
    """Placement failed: ``needed_bytes`` would be required, ``free_bytes`` were free."""

    reason: str
    needed_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class ResidentModel:
    """A model holding tier-1 memory, as eviction sees it."""

    model_id: str
    priority: Priority
    booked_bytes: int
    reload_estimate_ms: float
    requests_per_minute: float
    leased: bool = False
    # Its drafter's sharing key (`DraftShape.share_key`) and the draft weights its tier-1
    # booking includes (`planner.sharing` counts them once per key).
    draft_share_key: str = ""
    draft_weight_bytes: int = 0


@dataclass(frozen=True)
class EvictionPlan:
    """Which resident models to demote (in order) so ``needed_bytes`` fit."""

    evict: tuple[str, ...] = field(default_factory=tuple)
    fits: bool = True
    shortfall_bytes: int = 0
