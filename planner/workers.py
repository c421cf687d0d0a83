"""Split placement: a layered model's first layers in local tier 1, the rest on RPC workers.

Pure decision: ``place_split(PlacementRequest, workers) -> Placement | NoFit``; no I/O. The
workers' free bytes are measured or configured outside the planner and passed in.

How llama.cpp lays a model over devices (``llama_model_base::load_tensors``): the input
embedding always stays on the host; with ``n_gpu_layers = k`` the last ``k - 1`` repeating
layers and the output head go to the devices, split by ``tensor_split`` proportions in device
order. So the local part is the first layers and the workers take the last ones in the order
given, the last worker holding the output head. Conventions of the bookings:

- Local tier 1: every non-layer byte (the input embedding; the head's bytes too, which errs on
  the safe side), the projector, the workspace, the local layers with their KV cache, and a
  speculative drafter's weights and KV (`planner.placement.draft_bytes`).
- Each worker: its layers with their KV cache (llama.cpp keeps a layer's KV on the layer's
  device) and one workspace (``shape.workspace_bytes``: the compute buffer its backend gets).
  The last one also books ``shape.non_layer_bytes`` for the head: a tied head is a copy of
  the whole embedding.
- Workers are filled fastest first (``bandwidth_bytes_per_s``, then the order given): each
  layer boundary that crosses the network costs one activation transfer per token, so the
  fewest, fastest workers are used.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypnos.planner.placement import allocated_context, draft_bytes, with_draft
from hypnos.planner.types import NoFit, Placement, PlacementRequest, RemoteShare, Tier


@dataclass(frozen=True)
class WorkerBudget:
    """One RPC worker the planner may place into: ``free_bytes`` may be booked now."""
    endpoint: str
    free_bytes: int
    bandwidth_bytes_per_s: int = 0


def worker_order(workers: Sequence[WorkerBudget]) -> list[WorkerBudget]:
    """Fastest first; equal bandwidths keep the order given (the config's)."""
    return sorted(workers, key=lambda w: -w.bandwidth_bytes_per_s)


def place_split(req: PlacementRequest, workers: Sequence[WorkerBudget]) -> Placement | NoFit:
    """Place ``req.shape`` across ``req.tier1_free_bytes`` of local tier 1 and ``workers``.

    As many layers as fit stay local (at most all but one); the rest go to the workers in
    `worker_order`, each taking as many as fit, the last used one also holding the head.
    ``NoFit`` when the model has no layers, when the local fixed part does not fit, or when
    the workers cannot hold what is left (``needed_bytes``: what all of it would need on the
    workers, ``free_bytes``: what they have).
    """
    shape = req.shape
    n = shape.num_layers
    if n <= 0 or not workers:
        return NoFit(reason="only a layered model can be split across RPC workers",
                     needed_bytes=0, free_bytes=0)
    ctx = allocated_context(req)
    kv_layer = -(-shape.kv_bytes_per_token * ctx // n)
    unit = shape.layer_bytes + kv_layer
    dw, dkv = draft_bytes(shape, ctx)
    fixed = shape.non_layer_bytes + shape.projector_bytes + shape.workspace_bytes + dw + dkv
    free = req.tier1_free_bytes
    if fixed > free:
        return NoFit(reason=f"the non-layer weights and workspace alone need {fixed} bytes of "
                            f"tier-1 memory, {free} free", needed_bytes=fixed, free_bytes=free)
    local = min(n - 1, (free - fixed) // unit) if unit > 0 else n - 1
    shares = _fill(workers, n - local, local, unit, shape.workspace_bytes,
                   shape.non_layer_bytes)
    if isinstance(shares, NoFit):
        return shares
    return with_draft(Placement(
        primary_tier=Tier.GPU, gpu_layers=local,
        vram_weight_bytes=shape.non_layer_bytes + shape.projector_bytes + dw
        + local * shape.layer_bytes,
        vram_kv_and_workspace_bytes=local * kv_layer + shape.workspace_bytes + dkv,
        allocated_context_len=ctx, remote=tuple(shares)), shape, ctx)


def _fill(workers: Sequence[WorkerBudget], layers: int, first: int, unit: int,
          workspace: int, head: int) -> list[RemoteShare] | NoFit:
    """Give ``layers`` layers (from ``first`` on) to the workers, the head to the last."""
    shares: list[RemoteShare] = []
    left = layers
    for worker in worker_order(workers):
        if left == 0:
            break
        last_cap = (worker.free_bytes - workspace - head) // unit if unit else left
        if last_cap >= left:            # the rest and the head fit here: the last worker
            shares.append(RemoteShare(worker.endpoint, first, left,
                                      workspace + head + left * unit, output=True))
            left = 0
            break
        # Not the last: leave at least one layer for a later worker to carry the head.
        take = min(left - 1, (worker.free_bytes - workspace) // unit if unit else 0)
        if take <= 0:
            continue
        shares.append(RemoteShare(worker.endpoint, first, take, workspace + take * unit))
        first, left = first + take, left - take
    if left:
        needed = layers * unit + workspace + head
        have = sum(max(0, w.free_bytes) for w in workers)
        return NoFit(reason=f"{layers} layers do not fit in tier 1; the RPC workers hold "
                            f"{have} free bytes, the rest needs {needed} or more",
                     needed_bytes=needed, free_bytes=have)
    return shares
