"""A speculative drafter booked with its target (issue 30): its weights and its own KV go
where the target's weights go, shared draft weights are booked once, and eviction frees
only what a model holds alone. Every figure is computed by hand in the comment beside it."""
from dataclasses import replace
from pathlib import Path

from hypnos.engines.gguf_meta import GgufMeta
from hypnos.planner.loading import LoadPlan, plan_load
from hypnos.planner.placement import place
from hypnos.planner.process_memory import process_memory
from hypnos.planner.sharing import (added_bytes, net_booked, plan_shared_eviction,
                                    shared_draft_bytes)
from hypnos.planner.types import (Budgets, DraftShape, ModelShape, Placement, PlacementRequest,
                                  Priority, ResidentModel, Tier, Topology)
from hypnos.planner.workers import WorkerBudget, place_split

DRAFT = DraftShape("small", weights_bytes=40, kv_bytes_per_token=1)
# 10 layers of 100 + 50 non-layer = 1050 weights; 2 KV bytes a token; 30 workspace.
SHAPE = ModelShape(weights_bytes=1050, num_layers=10, layer_bytes=100, non_layer_bytes=50,
                   kv_bytes_per_token=2, workspace_bytes=30, draft=DRAFT)


def request(free: int, shape: ModelShape = SHAPE, **kw) -> PlacementRequest:
    return PlacementRequest(shape, tier1_free_bytes=free, slots=2, context_len=100, **kw)


def test_a_whole_gpu_placement_books_the_drafts_weights_and_kv_in_tier1():
    p = place(request(10_000))
    assert isinstance(p, Placement)
    assert p.gpu_layers == 10
    assert p.vram_weight_bytes == 50 + 40 + 10 * 100              # 1090
    assert p.vram_kv_and_workspace_bytes == 2 * 100 + 30 + 1 * 100  # 330
    assert p.booked_tier1_bytes == 1420
    assert (p.draft_id, p.draft_weight_bytes, p.draft_kv_bytes) == ("small", 40, 100)
    assert p.draft_in_tier1 and p.draft_share_key == "small"
    assert p.to_wire()["draft_weight_bytes"] == 40 and p.to_wire()["draft_kv_bytes"] == 100
    without = place(request(10_000, replace(SHAPE, draft=None)))
    assert isinstance(without, Placement) and without.booked_tier1_bytes == 1420 - 140
    assert "draft_weight_bytes" not in without.to_wire()


def test_the_drafts_kv_is_its_per_token_bytes_times_the_targets_whole_context():
    # context 100 over 2 slots: the draft mirrors both sequences of 50 -> 100 tokens.
    p = place(PlacementRequest(SHAPE, tier1_free_bytes=10_000, slots=2, context_len=100))
    assert isinstance(p, Placement) and p.draft_kv_bytes == 100 * DRAFT.kv_bytes_per_token


def test_a_split_keeps_the_draft_in_the_fixed_tier1_part():
    p = place(request(800))
    assert isinstance(p, Placement)
    # fixed = 50 + 40 weights + 330 KV/workspace = 420; (800 - 420) // 100 = 3 layers
    assert (p.gpu_layers, p.pinned_ram_layers) == (3, 7)
    assert p.vram_weight_bytes == 90 + 300
    assert p.vram_kv_and_workspace_bytes == 330
    assert p.pinned_ram_bytes == 700


def test_a_host_placement_puts_the_draft_in_host_memory():
    p = place(request(10_000, replace(SHAPE, gpu_capable=False), discrete_gpu=True))
    assert isinstance(p, Placement) and p.booked_tier1_bytes == 0
    # 1050 weights + 200 KV + 30 workspace + 40 draft weights + 100 draft KV
    assert p.pinned_ram_bytes == 1420
    assert not p.draft_in_tier1 and p.draft_weight_bytes == 40


def test_a_cpu_only_host_books_the_draft_in_tier1_process_memory():
    p = place(request(10_000, replace(SHAPE, gpu_capable=False)))
    assert isinstance(p, Placement)
    assert p.vram_weight_bytes == 1050 + 40 and p.vram_kv_and_workspace_bytes == 330
    assert p.draft_in_tier1


def test_a_draft_that_does_not_fit_beside_the_fixed_part_is_refused():
    # 420 fixed + 1 layer = 520 needed: 519 free is one byte short.
    refused = place(request(519))
    assert not isinstance(refused, Placement) and refused.needed_bytes == 520


def test_an_rpc_split_keeps_the_draft_local():
    p = place_split(request(700), [WorkerBudget("w:1", 1000)])
    assert isinstance(p, Placement)
    # local fixed = 50 + 30 + 40 + 100 = 220; a layer = 100 + ceil(200 / 10) KV = 120;
    # (700 - 220) // 120 = 4 local layers; the worker: 6 x 120 + 30 + 50 = 800
    assert p.gpu_layers == 4
    assert p.vram_weight_bytes == 50 + 40 + 400
    assert p.vram_kv_and_workspace_bytes == 4 * 20 + 30 + 100
    assert p.remote[0].layers == 6 and p.remote[0].bytes == 800
    assert p.draft_weight_bytes == 40 and p.draft_kv_bytes == 100


def test_mtp_heads_in_the_targets_file_add_only_their_kv():
    meta = GgufMeta(path=Path("t.gguf"), architecture="qwen35", num_layers=4,
                    embedding_length=64, head_count=4, head_count_kv=2, head_dim=16,
                    value_dim=16, context_length=4096, vocab_size=1000,
                    feed_forward_length=128, expert_count=0, expert_used_count=0,
                    chat_template=None, file_bytes=4600, tensor_bytes=4500,
                    non_layer_bytes=500, layer_bytes=(1000, 1000, 1000, 1000),
                    expert_bytes=0, nextn_layers=1)
    head = meta.mtp_draft()
    # one block's KV: 2 bytes x 2 KV heads x (16 + 16) = 128 a token
    assert head.kv_bytes_per_token == 128 == meta.block_kv_bytes_per_token
    assert head.in_target and head.weights_bytes == 1000 and head.booked_weights_bytes == 0
    assert head.share_key == ""
    p = place(PlacementRequest(meta.to_shape(draft=head), tier1_free_bytes=10**9,
                               context_len=100))
    assert isinstance(p, Placement)
    assert p.draft_weight_bytes == 0 and p.draft_kv_bytes == 12_800
    assert p.vram_weight_bytes == 4500
    separate = meta.mtp_draft(replace(meta, tensor_bytes=700, nextn_layers=1))
    assert (separate.booked_weights_bytes, separate.kv_bytes_per_token) == (700, 128)


def test_two_targets_of_one_draft_book_its_weights_once():
    a, b = place(request(10_000)), place(request(10_000))
    assert isinstance(a, Placement) and isinstance(b, Placement)
    assert shared_draft_bytes([a, b]) == 40
    assert shared_draft_bytes([a, b], in_tier1=False) == 0
    other = replace(b, draft_share_key="other")
    assert shared_draft_bytes([a, other]) == 0


def resident(mid, booked, key="", weights=0, priority=Priority.NORMAL, leased=False):
    return ResidentModel(mid, priority, booked, reload_estimate_ms=100.0,
                         requests_per_minute=1.0, leased=leased, draft_share_key=key,
                         draft_weight_bytes=weights)


def test_a_second_target_adds_only_its_own_kv_and_the_rest():
    p = place(request(10_000))
    assert isinstance(p, Placement)
    a = resident("a", 1420, "small", 40)
    assert added_bytes(p, [a]) == 1380
    assert added_bytes(p, [resident("x", 1420, "other", 40)]) == 1420
    assert net_booked([a, resident("c", 1420, "small", 40)]) == 2800


def test_plan_load_fits_the_second_target_in_the_room_the_shared_weights_leave():
    a = resident("a", 1420, "small", 40)
    budgets = Budgets(tier1_bytes=2800, tier2_bytes=0, unified_memory=False)
    plan = plan_load(request(0), [a], budgets, rss=0, cap=None)
    assert isinstance(plan, LoadPlan) and plan.evict == ()        # 1420 + 1380 = 2800
    stranger = resident("a", 1420, "other", 40)
    plan = plan_load(request(0), [stranger], budgets, rss=0, cap=None)
    assert isinstance(plan, LoadPlan) and plan.evict == ("a",)    # 1420 + 1420 > 2800


def test_evicting_a_target_whose_draft_another_keeps_frees_less():
    low = resident("a", 1420, "small", 40, priority=Priority.LOW)
    kept = resident("c", 1420, "small", 40)
    incoming = Placement(primary_tier=Tier.GPU, vram_weight_bytes=1500)
    # budget 2900, booked 2800 (the weights once): evicting "a" frees 1380, not 1420:
    # 2900 - 1420 = 1480 < 1500, so "c" must go too (a gross count would stop at "a").
    plan = plan_shared_eviction(incoming, 2900, [low, kept])
    assert plan.fits and plan.evict == ("a", "c")
    plan = plan_shared_eviction(incoming, 2900, [low, replace(kept, leased=True)])
    assert not plan.fits and plan.shortfall_bytes == 20


def test_process_memory_counts_shared_host_drafts_once():
    host = place(request(10_000, replace(SHAPE, gpu_capable=False), discrete_gpu=True))
    assert isinstance(host, Placement)
    both = process_memory(0, Topology.DISCRETE, [host, host], tier2_bytes=0)
    assert both.booked_bytes == 2 * 1420 - 40
    gpu = place(request(10_000, replace(SHAPE, gpu_capable=False)))
    assert isinstance(gpu, Placement)
    cpu = process_memory(0, Topology.CPU_ONLY, [gpu, gpu], tier2_bytes=0)
    assert cpu.booked_bytes == 2 * 1420 - 40
