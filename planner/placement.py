"""Placement: where one model's weights, KV cache and workspace go, given the free tier-1 bytes.

Pure decision: ``place(PlacementRequest) -> Placement | NoFit``; no I/O, no logging.

Conventions (see also the spec's LayerPlacementPlan):

- Everything fixed is booked in tier 1: non-layer weights (embeddings, output head), the
  projector, the compute workspace and the whole KV cache (llama.cpp keeps the KV of CPU
  layers in host memory, so booking all of it in VRAM errs on the safe side). The slots'
  context checkpoints (`ModelShape.checkpoints_booked`) are copies in host memory: beside a
  discrete GPU they are booked in ``pinned_ram_bytes``, not in VRAM; on a CPU-only host or
  unified memory, where tier 1 is that memory, with the KV.
- Layers left off the GPU are ``pinned_ram_layers``; ``ssd_layers`` is always 0: llama.cpp
  mmaps the weights file, so a layer is either in VRAM or in host memory while running.
- ``cpu_expert_layers`` counts layers on the GPU whose Mixture-of-Experts expert tensors run
  on the CPU from host memory; their bytes are in ``pinned_ram_bytes``. In a layer split with
  offloaded experts it equals ``gpu_layers`` (the CPU layers hold their experts anyway), so an
  engine passing llama.cpp's ``n_cpu_moe`` uses ``cpu_expert_layers + pinned_ram_layers``.
- A non-layered shape (``num_layers == 0``: whisper, ONNX, docling ...) and any shape with
  ``gpu_capable=False`` are placed whole in tier 1 or not at all: on a CPU-only host tier 1 is
  the process memory, so "whole in tier 1" means "engine loaded and ready". Such a layered
  shape reports ``gpu_layers = num_layers`` (its layers are in tier-1 memory).
- Except beside a discrete GPU (``discrete_gpu``): there tier 1 is VRAM, and a shape with
  ``gpu_capable=False`` (an engine, or an engine build, that computes on the host) books
  nothing in it. It is a host placement: primary tier 1 (engine loaded and ready), no GPU
  layer, every layer in ``pinned_ram_layers``, its whole footprint (weights, KV, workspace)
  in ``pinned_ram_bytes``, ``device`` "cpu". It always fits (host memory is not a tier-1
  budget).
- A speculative drafter (``shape.draft``) goes where the model's weights go: its weights
  (`DraftShape.booked_weights_bytes`) join the fixed weights and its own KV
  (``kv_bytes_per_token`` x the allocated context: a draft model's context mirrors the
  target's sequences) the KV and workspace, in tier 1 (``draft_in_tier1``), or in
  ``pinned_ram_bytes`` for a host placement. A split placement keeps it in local tier 1
  (llama.cpp loads the draft with the target's ``gpu_layers``). Sharing one load between
  targets is booked by `planner.sharing`, over placements.
"""
from __future__ import annotations

import math
from dataclasses import replace

from hypnos.planner.context import DEFAULT_CONTEXT_CAP, FALLBACK_CONTEXT, default_per_slot
from hypnos.planner.types import (MoeOffload, ModelShape, NoFit, Placement, PlacementRequest,
                                  Tier)

# Re-exported: context_len <= 0 (the config's "0") means `default_per_slot` (planner.context).
__all__ = ["DEFAULT_CONTEXT_CAP", "FALLBACK_CONTEXT", "allocated_context", "draft_bytes",
           "effective_moe_offload", "place", "with_draft"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def allocated_context(req: PlacementRequest) -> int:
    """The context window the placement funds across all slots: ``req.context_len`` clamped to
    ``max_context_len x slots`` when the trained context is known (0 for a whole-model shape
    without a KV cache)."""
    shape = req.shape
    if shape.num_layers <= 0 and shape.kv_bytes_per_token <= 0:
        return 0
    ctx = req.context_len
    if ctx <= 0:
        ctx = default_per_slot(shape.max_context_len)
    if shape.max_context_len > 0:
        ctx = min(ctx, shape.max_context_len * max(1, req.slots))
    return ctx


def effective_moe_offload(req: PlacementRequest) -> MoeOffload:
    """The mode that applies: off for a dense shape; "auto" is for discrete GPUs only and is
    ignored on unified memory ("on" still applies there)."""
    if req.shape.expert_bytes_per_layer <= 0:
        return MoeOffload.OFF
    if req.moe_offload is MoeOffload.AUTO and req.unified_memory:
        return MoeOffload.OFF
    return req.moe_offload


def place(req: PlacementRequest) -> Placement | NoFit:
    """Place ``req.shape`` in ``req.tier1_free_bytes``.

    Layered, GPU-capable shapes: the whole model on the GPU when it fits; with moe_offload
    "on" every layer's experts go to host memory; with "auto" (discrete GPUs) the experts of
    as few layers as needed move to host memory before any layer split; then as many layers
    as fit stay on the GPU (a partial placement) unless fewer than
    ``min_gpu_layer_ratio`` of them (and at least one) would. ``NoFit.needed_bytes`` is the
    smallest tier-1 free memory with which the model would have been placed.
    """
    ctx = allocated_context(req)
    kv = req.shape.kv_bytes_per_token * ctx
    checkpoints = req.shape.checkpoints_booked(req.slots)
    if not req.shape.gpu_capable and req.discrete_gpu:
        return with_draft(_place_on_host(req, ctx, kv + checkpoints), req.shape, ctx,
                          in_tier1=False)
    in_host = checkpoints if req.discrete_gpu else 0      # host copies beside VRAM
    kv += checkpoints - in_host
    if req.shape.num_layers <= 0 or not req.shape.gpu_capable:
        placed = _place_whole(req, ctx, kv)
    else:
        placed = _place_layers(req, ctx, kv)
    if isinstance(placed, NoFit):
        return placed
    if in_host:
        placed = replace(placed, pinned_ram_bytes=placed.pinned_ram_bytes + in_host)
    return with_draft(placed, req.shape, ctx)


def draft_bytes(shape: ModelShape, ctx: int) -> tuple[int, int]:
    """(weights, KV) bytes ``shape``'s drafter adds at ``ctx`` tokens of context: its booked
    weights and ``kv_bytes_per_token x ctx``; (0, 0) without one."""
    draft = shape.draft
    if draft is None:
        return 0, 0
    return draft.booked_weights_bytes, draft.kv_bytes_per_token * ctx


def with_draft(placement: Placement, shape: ModelShape, ctx: int,
               in_tier1: bool = True) -> Placement:
    """``placement`` labelled with the drafter its figures already include."""
    if shape.draft is None:
        return placement
    weights, kv = draft_bytes(shape, ctx)
    return replace(placement, draft_id=shape.draft.model_id, draft_weight_bytes=weights,
                   draft_kv_bytes=kv, draft_in_tier1=in_tier1,
                   draft_share_key=shape.draft.share_key)


def _place_on_host(req: PlacementRequest, ctx: int, kv: int) -> Placement:
    shape = req.shape
    dw, dkv = draft_bytes(shape, ctx)
    host = shape.weights_bytes + shape.projector_bytes + kv + shape.workspace_bytes + dw + dkv
    return Placement(primary_tier=Tier.GPU, gpu_layers=0, pinned_ram_layers=shape.num_layers,
                     pinned_ram_bytes=host, allocated_context_len=ctx, device="cpu")


def _place_whole(req: PlacementRequest, ctx: int, kv: int) -> Placement | NoFit:
    shape = req.shape
    dw, dkv = draft_bytes(shape, ctx)
    weights = shape.weights_bytes + shape.projector_bytes + dw
    kv_ws = kv + shape.workspace_bytes + dkv
    needed = weights + kv_ws
    if needed > req.tier1_free_bytes:
        return NoFit(reason=f"the whole model needs {needed} bytes of tier-1 memory, "
                            f"{req.tier1_free_bytes} free",
                     needed_bytes=needed, free_bytes=req.tier1_free_bytes)
    return Placement(primary_tier=Tier.GPU, gpu_layers=shape.num_layers,
                     vram_weight_bytes=weights, vram_kv_and_workspace_bytes=kv_ws,
                     allocated_context_len=ctx)


def _place_layers(req: PlacementRequest, ctx: int, kv: int) -> Placement | NoFit:
    shape = req.shape
    n, lb, eb = shape.num_layers, shape.layer_bytes, shape.expert_bytes_per_layer
    dw, dkv = draft_bytes(shape, ctx)
    fixed_weights = shape.non_layer_bytes + shape.projector_bytes + dw
    kv_ws = kv + shape.workspace_bytes + dkv
    fixed = fixed_weights + kv_ws
    free = req.tier1_free_bytes
    mode = effective_moe_offload(req)
    full = fixed + n * lb
    if mode is MoeOffload.ON:
        experts = n
    elif mode is MoeOffload.AUTO and full > free:
        experts = _ceil_div(full - free, eb)
    else:
        experts = 0
    if experts <= n and full - experts * eb <= free:
        return Placement(primary_tier=Tier.GPU, gpu_layers=n,
                         vram_weight_bytes=fixed_weights + n * lb - experts * eb,
                         vram_kv_and_workspace_bytes=kv_ws, pinned_ram_bytes=experts * eb,
                         allocated_context_len=ctx, cpu_expert_layers=experts)
    return _split(req, ctx, fixed_weights, kv_ws, offload=mode is not MoeOffload.OFF)


def _split(req: PlacementRequest, ctx: int, fixed_weights: int, kv_ws: int,
           offload: bool) -> Placement | NoFit:
    """A partial placement: the first ``gpu`` layers in VRAM (minus their experts when
    ``offload``), the rest in host memory."""
    shape: ModelShape = req.shape
    n, lb = shape.num_layers, shape.layer_bytes
    eb = shape.expert_bytes_per_layer if offload else 0
    unit = lb - eb  # VRAM one GPU layer costs
    fixed = fixed_weights + kv_ws
    free = req.tier1_free_bytes
    min_gpu = min(n, max(1, math.ceil(round(req.min_gpu_layer_ratio * n, 6))))
    needed = fixed + min_gpu * unit
    if fixed > free:
        return NoFit(reason=f"the non-layer weights, KV cache and workspace alone need "
                            f"{fixed} bytes of tier-1 memory, {free} free",
                     needed_bytes=needed, free_bytes=free)
    gpu = min(n - 1, (free - fixed) // unit) if unit > 0 else n - 1
    if gpu < min_gpu:
        what = (f"min_gpu_layer_ratio {req.min_gpu_layer_ratio} needs {min_gpu}"
                if req.min_gpu_layer_ratio > 0 else "at least 1 is needed")
        return NoFit(reason=f"only {gpu} of {n} layers fit in tier-1 memory; {what}",
                     needed_bytes=needed, free_bytes=free)
    return Placement(primary_tier=Tier.GPU, gpu_layers=gpu, pinned_ram_layers=n - gpu,
                     vram_weight_bytes=fixed_weights + gpu * unit,
                     vram_kv_and_workspace_bytes=kv_ws,
                     pinned_ram_bytes=(n - gpu) * lb + gpu * eb,
                     allocated_context_len=ctx, cpu_expert_layers=gpu if eb else 0)
