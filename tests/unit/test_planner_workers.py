"""place_split and plan_load with RPC workers, on hand-computed shapes.

Shape: 10 layers x 1 GiB + 1 GiB non-layer; KV 64 KiB/token (all layers), so at 8192
context 512 MiB in all, 51.2 MiB a layer -> rounded up 53,687,092 bytes; workspace 512 MiB.
One layer with its KV costs 1 GiB + 53,687,092 bytes ("unit").
"""
from __future__ import annotations

import dataclasses

import pytest

from hypnos.planner import (GIB, MIB, Budgets, ModelShape, NoFit, Placement, PlacementRequest,
                            TooBig, WorkerBudget, place_split, plan_load, worker_order)
from hypnos.planner.loading import LoadPlan

KIB = 1024
SHAPE = ModelShape(weights_bytes=11 * GIB, num_layers=10, layer_bytes=GIB, non_layer_bytes=GIB,
                   kv_bytes_per_token=64 * KIB, workspace_bytes=512 * MIB,
                   max_context_len=32768, gpu_capable=False)
KV_LAYER = -(-64 * KIB * 8192 // 10)
UNIT = GIB + KV_LAYER
FIXED = GIB + 512 * MIB                  # non-layer + workspace, local


def _req(free: int) -> PlacementRequest:
    return PlacementRequest(shape=SHAPE, tier1_free_bytes=free, context_len=8192)


def _split(free: int, workers) -> Placement:
    p = place_split(_req(free), workers)
    assert isinstance(p, Placement), p
    return p


def test_local_first_then_workers_in_order_the_last_holding_the_head():
    # Local: 1.5 GiB fixed + 3 units fit in FIXED + 3 UNIT + a little.
    local_free = FIXED + 3 * UNIT + MIB
    # Worker a: its workspace (512 MiB) + 4 units, no room for the head (1 GiB) as well.
    a = WorkerBudget("10.0.0.2:50052", 512 * MIB + 4 * UNIT + MIB)
    b = WorkerBudget("10.0.0.3:50052", 8 * GIB)
    p = _split(local_free, [a, b])
    assert p.gpu_layers == 3
    assert [(s.endpoint, s.first_layer, s.layers, s.output) for s in p.remote] == [
        ("10.0.0.2:50052", 3, 4, False), ("10.0.0.3:50052", 7, 3, True)]
    assert p.remote[0].bytes == 512 * MIB + 4 * UNIT
    assert p.remote[1].bytes == 512 * MIB + GIB + 3 * UNIT          # + the head
    assert p.vram_weight_bytes == GIB + 3 * GIB
    assert p.vram_kv_and_workspace_bytes == 3 * KV_LAYER + 512 * MIB
    assert p.remote_layers + p.gpu_layers == 10
    wire = p.to_wire()["rpc_workers"]
    assert wire[1] == {"endpoint": "10.0.0.3:50052", "first_layer": 7, "layers": 3,
                       "booked_bytes": 512 * MIB + GIB + 3 * UNIT, "output_head": True}


def test_one_worker_takes_everything_left_with_the_head():
    p = _split(FIXED + UNIT, [WorkerBudget("127.0.0.1:1", 64 * GIB)])
    assert p.gpu_layers == 1
    assert [(s.first_layer, s.layers, s.output) for s in p.remote] == [(1, 9, True)]


def test_faster_worker_first_equal_ones_in_config_order():
    slow = WorkerBudget("127.0.0.1:1", 64 * GIB, bandwidth_bytes_per_s=100)
    fast = WorkerBudget("127.0.0.1:2", 64 * GIB, bandwidth_bytes_per_s=1000)
    same = WorkerBudget("127.0.0.1:3", 64 * GIB, bandwidth_bytes_per_s=100)
    assert [w.endpoint for w in worker_order([slow, fast, same])] == [
        "127.0.0.1:2", "127.0.0.1:1", "127.0.0.1:3"]
    p = _split(FIXED, [slow, fast])
    assert [s.endpoint for s in p.remote] == ["127.0.0.1:2"]


def test_at_least_one_layer_leaves_even_when_all_would_fit_locally():
    p = _split(64 * GIB, [WorkerBudget("127.0.0.1:1", 64 * GIB)])
    assert p.gpu_layers == 9 and p.remote_layers == 1


@pytest.mark.parametrize("local,workers,reason", [
    (FIXED - 1, [WorkerBudget("127.0.0.1:1", 64 * GIB)], "non-layer weights"),
    (FIXED, [WorkerBudget("127.0.0.1:1", 512 * MIB + GIB + 9 * UNIT)], "do not fit"),
    (FIXED, [], "only a layered model"),
])
def test_no_fit(local, workers, reason):
    result = place_split(_req(local), workers)
    assert isinstance(result, NoFit) and reason in result.reason


def test_the_workers_hold_exactly_enough():
    # 10 layers left, all on one worker: workspace + head + 10 units.
    need = 512 * MIB + GIB + 10 * UNIT
    assert isinstance(place_split(_req(FIXED), [WorkerBudget("h:1", need - 1)]), NoFit)
    p = _split(FIXED, [WorkerBudget("h:1", need)])
    assert p.gpu_layers == 0 and p.remote[0].bytes == need


def test_plan_load_splits_only_what_does_not_fit_alone():
    budgets = Budgets(tier1_bytes=FIXED + 2 * UNIT, tier2_bytes=0, unified_memory=False)
    workers = [WorkerBudget("127.0.0.1:1", 64 * GIB)]
    # Without workers: too big (the whole model needs 12.5 GiB of tier 1).
    assert isinstance(plan_load(_req(0), [], budgets, rss=0, cap=None), TooBig)
    plan = plan_load(_req(0), [], budgets, rss=0, cap=None, workers=workers)
    assert isinstance(plan, LoadPlan) and plan.placement.gpu_layers == 2
    assert plan.placement.remote[0].layers == 8
    assert plan.placement.booked_tier1_bytes == FIXED + 2 * UNIT
    # It fits alone: no split even with workers.
    big = Budgets(tier1_bytes=64 * GIB, tier2_bytes=0, unified_memory=False)
    whole = plan_load(_req(0), [], big, rss=0, cap=None, workers=workers)
    assert isinstance(whole, LoadPlan) and not whole.placement.remote


def test_on_a_gpu_workers_come_before_layers_in_host_memory():
    gpu_shape = dataclasses.replace(SHAPE, gpu_capable=True)
    budgets = Budgets(tier1_bytes=FIXED + 4 * UNIT, tier2_bytes=0,
                      unified_memory=False)
    req = PlacementRequest(shape=gpu_shape, tier1_free_bytes=0, context_len=8192)
    # Alone it would spill layers into host memory; with a worker they go there instead.
    alone = plan_load(req, [], budgets, rss=0, cap=None)
    assert isinstance(alone, LoadPlan) and alone.placement.pinned_ram_layers > 0
    split = plan_load(req, [], budgets, rss=0, cap=None,
                      workers=[WorkerBudget("127.0.0.1:1", 64 * GIB)])
    assert isinstance(split, LoadPlan) and split.placement.pinned_ram_layers == 0
    assert split.placement.gpu_layers + split.placement.remote_layers == 10
    # A worker too small for the rest: the host-memory placement stays.
    small = plan_load(req, [], budgets, rss=0, cap=None,
                      workers=[WorkerBudget("127.0.0.1:1", GIB)])
    assert isinstance(small, LoadPlan) and not small.placement.remote
    assert small.placement.pinned_ram_layers == alone.placement.pinned_ram_layers
