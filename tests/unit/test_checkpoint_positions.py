"""Context checkpoints, the pure parts (issue #36 item 2): where a prefill stops to take one
(``positions``), how a slot's list stays bounded (``add``) and cut (``drop_after``), what one
costs by the GGUF's recurrent-state keys, and that the planner books them. The same on a real
hybrid and sliding-window model: tests/engines/test_checkpoints.py."""
from __future__ import annotations

import dataclasses

from hypnos.engines.gguf_meta import recurrent_state_bytes
from hypnos.engines.llama.checkpoints import (CHECKPOINTS_PER_SLOT, Checkpoint, add, drop_after,
                                              positions)
from hypnos.planner import GIB, MIB, ModelShape, Placement, PlacementRequest, place


def cps(*counts: int) -> list[Checkpoint]:
    return [Checkpoint(n, bytearray(b"x")) for n in counts]


def counts(checkpoints: list[Checkpoint]) -> list[int]:
    return [c.n_tokens for c in checkpoints]


# ------------------------------------------------------------------ positions

def test_a_long_prefill_stops_every_n_tokens_and_near_its_end():
    assert positions(0, 2500, every=1024, tail=(16, 64), min_gap=32) == [1024, 2048, 2436, 2484]


def test_nothing_at_or_before_what_the_slot_already_holds():
    # 1024 is covered by the 1100 tokens reused; only the next multiple and the tail.
    assert positions(1100, 2500, every=1024, tail=(16,), min_gap=32) == [2048, 2484]
    assert positions(2490, 2500, every=1024, tail=(16, 64), min_gap=32) == []


def test_a_short_prompt_takes_none_under_the_minimum_gap():
    assert positions(0, 40, every=1024, tail=(16, 64), min_gap=32) == []
    assert positions(0, 100, every=1024, tail=(16, 64), min_gap=32) == [36, 84]


def test_a_named_boundary_wins_over_a_tail_too_close_to_it():
    # The boundary 2470 and the tail 2484 are 14 apart: the boundary is kept.
    assert positions(0, 2500, boundaries=[2470], every=0, tail=(16,), min_gap=32) == [2470]
    assert positions(0, 2500, boundaries=[300, 2470], every=1024, tail=(16, 64),
                     min_gap=32) == [300, 1024, 2048, 2436, 2470]


def test_none_next_to_a_checkpoint_the_slot_keeps():
    assert positions(1000, 2500, existing=[1000, 2040], every=1024, tail=(16,),
                     min_gap=32) == [2484]


def test_boundaries_outside_the_prefill_are_ignored():
    assert positions(500, 1000, boundaries=[100, 500, 1000, 4000], every=0, tail=(),
                     min_gap=32) == []


# ------------------------------------------------------------------ bounding

def test_add_keeps_them_in_order_and_replaces_one_at_the_same_count():
    slot = cps(100, 300)
    add(slot, Checkpoint(200, bytearray()))
    assert counts(slot) == [100, 200, 300]
    new = Checkpoint(200, bytearray(b"new"))
    add(slot, new)
    assert counts(slot) == [100, 200, 300] and slot[1] is new


def test_over_the_limit_the_checkpoint_leaving_the_smallest_gap_goes():
    slot = cps(100, 1000, 1100, 2000)
    dropped = add(slot, Checkpoint(3000, bytearray()), limit=4)
    # Dropping 1000 leaves 100..1100 (1000), dropping 1100 leaves 1000..2000 (1000),
    # dropping 2000 leaves 1100..3000 (1900): the first of the smallest goes.
    assert counts(slot) == [100, 1100, 2000, 3000] and counts(dropped) == [1000]


def test_the_first_and_the_newest_are_never_dropped():
    slot: list[Checkpoint] = []
    for n in range(100, 2100, 100):
        add(slot, Checkpoint(n, bytearray()), limit=CHECKPOINTS_PER_SLOT)
        assert len(slot) <= CHECKPOINTS_PER_SLOT
    assert slot[0].n_tokens == 100 and slot[-1].n_tokens == 2000
    assert counts(slot) == sorted(counts(slot))


def test_a_limit_of_one_keeps_the_newest():
    slot = cps(100)
    add(slot, Checkpoint(200, bytearray()), limit=1)
    assert counts(slot) == [200]


def test_a_cut_drops_the_checkpoints_beyond_it():
    slot = cps(100, 500, 900)
    drop_after(slot, 500)
    assert counts(slot) == [100, 500]
    drop_after(slot, 0)
    assert slot == []


# ------------------------------------------------------------------ booking

def test_the_recurrent_state_of_one_block_from_the_gguf_keys():
    # Tiny Qwen3.5 (tests/tiny_qwen35.py): conv kernel 4, inner 64, state 16, 2 groups:
    # conv 3 x (64 + 2 x 2 x 16) = 384 floats, state 16 x 64 = 1024 floats: 5632 bytes.
    assert recurrent_state_bytes(4, 64, 16, 2) == 5632
    # Qwen3.5-27B-like: conv 3 x (6144 + 2 x 16 x 128) = 30720, state 128 x 6144 = 786432
    # floats: 3 MiB + 120 KiB per block.
    assert recurrent_state_bytes(4, 6144, 128, 16) == 4 * (30720 + 786432)
    assert recurrent_state_bytes(0, 0, 0, 0) == 0


SHAPE = ModelShape(weights_bytes=11 * GIB, num_layers=10, layer_bytes=GIB, non_layer_bytes=GIB,
                   kv_bytes_per_token=64 * 1024, workspace_bytes=512 * MIB,
                   max_context_len=32768)


def test_the_planner_books_every_slots_checkpoints_with_the_kv():
    """slots x CHECKPOINTS_PER_SLOT x checkpoint_bytes more, in the KV's place; nothing
    for a model that takes none."""
    with_cp = dataclasses.replace(SHAPE, checkpoint_bytes=3 * MIB)
    assert SHAPE.checkpoints_booked(4) == 0
    assert with_cp.checkpoints_booked(4) == 4 * CHECKPOINTS_PER_SLOT * 3 * MIB
    for shape_free in (40, 6):                   # whole, then a layer split
        plain = place(PlacementRequest(shape=SHAPE, tier1_free_bytes=shape_free * GIB,
                                       slots=4, context_len=8192))
        booked = place(PlacementRequest(shape=with_cp, tier1_free_bytes=shape_free * GIB,
                                        slots=4, context_len=8192))
        assert isinstance(plain, Placement) and isinstance(booked, Placement)
        assert (booked.vram_kv_and_workspace_bytes - plain.vram_kv_and_workspace_bytes
                == 4 * CHECKPOINTS_PER_SLOT * 3 * MIB)


def test_beside_a_discrete_gpu_the_checkpoints_are_booked_in_host_memory():
    """The checkpoints are host copies: beside a discrete GPU the VRAM figure is the plain
    one and ``pinned_ram_bytes`` carries them; the same fit (they take no VRAM)."""
    with_cp = dataclasses.replace(SHAPE, checkpoint_bytes=3 * MIB)
    booked = 4 * CHECKPOINTS_PER_SLOT * 3 * MIB
    for shape_free in (40, 6):                   # whole, then a layer split
        common = dict(tier1_free_bytes=shape_free * GIB, slots=4, context_len=8192,
                      discrete_gpu=True)
        plain = place(PlacementRequest(shape=SHAPE, **common))
        host = place(PlacementRequest(shape=with_cp, **common))
        assert isinstance(plain, Placement) and isinstance(host, Placement)
        assert host.vram_kv_and_workspace_bytes == plain.vram_kv_and_workspace_bytes
        assert host.gpu_layers == plain.gpu_layers
        assert host.pinned_ram_bytes - plain.pinned_ram_bytes == booked
