"""place(), kv_bytes_per_token and shape_from_arch on hand-computed shapes.

Shapes are built with round GiB numbers so the expected bytes can be checked by hand; the
arithmetic is in the comments.
"""
from __future__ import annotations

import dataclasses

import pytest

from hypnos.planner import (GIB, MIB, ModelShape, MoeOffload, NoFit, Placement,
                            PlacementRequest, Tier, kv_bytes_per_token, place, shape_from_arch)

KIB = 1024

# Dense: 10 layers x 1 GiB + 1 GiB non-layer; KV 64 KiB/token; workspace 512 MiB.
# At 8192 context: KV = 8192 x 64 KiB = 512 MiB -> fixed = 1 GiB + 512 MiB + 512 MiB = 2 GiB,
# whole model = 2 + 10 = 12 GiB.
DENSE = ModelShape(weights_bytes=11 * GIB, num_layers=10, layer_bytes=GIB, non_layer_bytes=GIB,
                   kv_bytes_per_token=64 * KIB, workspace_bytes=512 * MIB,
                   max_context_len=32768)

# MoE: 10 layers x 2 GiB, of which 1.5 GiB experts; same fixed part (2 GiB at 8192);
# whole model = 2 + 20 = 22 GiB; a layer without its experts costs 0.5 GiB.
MOE = ModelShape(weights_bytes=21 * GIB, num_layers=10, layer_bytes=2 * GIB,
                 non_layer_bytes=GIB, expert_bytes_per_layer=3 * GIB // 2,
                 kv_bytes_per_token=64 * KIB, workspace_bytes=512 * MIB, max_context_len=32768)


def _req(shape, free_gib, **kw):
    kw.setdefault("context_len", 8192)
    return PlacementRequest(shape=shape, tier1_free_bytes=int(free_gib * GIB), **kw)


def _placed(req) -> Placement:
    p = place(req)
    assert isinstance(p, Placement), p
    return p


# ----------------------------------------------------------------- footprints

def test_kv_bytes_per_token():
    assert kv_bytes_per_token(30, 3, 64) == 23040        # 2 x 30 x 3 x 64 x 2
    assert kv_bytes_per_token(30, 3, 64, 1) == 11520     # q8 cache: 1 byte per element


def test_shape_from_arch_capped_embedding_share():
    # d = 1000, 10 layers: layer params 10 x 12 x 1e6 = 120e6; embedding 2 x 32000 x 1000 =
    # 64e6; share 64 / 184 = 0.348 > 0.25 -> capped: non-layer 250e6, layers 750e6 / 10.
    s = shape_from_arch(1_000_000_000, num_layers=10, embedding_length=1000, head_count_kv=4,
                        head_dim=128, context_length=16384)
    assert s.layer_bytes == 75_000_000
    assert s.non_layer_bytes == 250_000_000
    assert s.kv_bytes_per_token == 20480                 # 2 x 10 x 4 x 128 x 2
    # 32 MiB + 512 x 4 x (32000 + 12 x 1000) = 33554432 + 90112000
    assert s.workspace_bytes == 123_666_432
    assert s.max_context_len == 16384 and s.expert_bytes_per_layer == 0


def test_shape_from_arch_uncapped_share_and_experts():
    # d = 4096, 32 layers, dense: 32 x 12 x 4096^2 = 6442450944; embedding 262144000;
    # share = 262144000 / 6704594944 = 0.0391 -> non-layer of 4e9 bytes ~ 156.4 MB
    s = shape_from_arch(4_000_000_000, num_layers=32, embedding_length=4096, head_count_kv=8,
                        head_dim=128, context_length=8192, expert_fraction=0.5)
    # with expert_fraction 0.5 the layers count double: 262144000 / (12884901888 + 262144000)
    # = 0.01994 -> non-layer ~ 79.8 MB, layers (4e9 - 79.8e6) / 32 ~ 122.5 MB
    assert abs(s.non_layer_bytes - 79_760_000) < 1_000_000
    assert s.non_layer_bytes + 32 * s.layer_bytes == 4_000_000_000
    assert s.expert_bytes_per_layer == s.layer_bytes // 2


def test_shape_from_arch_without_layers_is_a_whole_model():
    s = shape_from_arch(500 * MIB, num_layers=0, embedding_length=0, head_count_kv=0,
                        head_dim=0, context_length=0, gpu_capable=False)
    assert (s.num_layers, s.layer_bytes, s.kv_bytes_per_token) == (0, 0, 0)
    assert s.workspace_bytes == 64 * MIB and s.gpu_capable is False


# ----------------------------------------------------------------- dense

def test_dense_fits_whole():
    p = _placed(_req(DENSE, 16))
    assert p.primary_tier is Tier.GPU
    assert (p.gpu_layers, p.pinned_ram_layers, p.ssd_layers) == (10, 0, 0)
    assert p.vram_weight_bytes == 11 * GIB               # 1 non-layer + 10 layers
    assert p.vram_kv_and_workspace_bytes == GIB          # 512 MiB KV + 512 MiB workspace
    assert p.booked_tier1_bytes == 12 * GIB
    assert p.pinned_ram_bytes == 0 and p.allocated_context_len == 8192


def test_dense_fits_exactly_at_the_boundary():
    assert _placed(_req(DENSE, 12)).gpu_layers == 10
    # one byte short of the whole 12 GiB: (12 GiB - 1 - 2 GiB) // 1 GiB = 9 layers
    assert _placed(_req(DENSE, 12 - 1 / GIB)).gpu_layers == 9


def test_partial_placement():
    # 8 GiB free: (8 - 2) // 1 = 6 layers on the GPU, 4 in RAM
    p = _placed(_req(DENSE, 8))
    assert (p.gpu_layers, p.pinned_ram_layers) == (6, 4)
    assert p.vram_weight_bytes == 7 * GIB                # 1 + 6
    assert p.pinned_ram_bytes == 4 * GIB
    assert p.cpu_expert_layers == 0 and p.primary_tier is Tier.GPU


def test_min_gpu_layer_ratio_refusal():
    # 6 of 10 layers fit; a ratio of 0.7 needs 7 -> needs 2 + 7 = 9 GiB
    r = place(_req(DENSE, 8, min_gpu_layer_ratio=0.7))
    assert isinstance(r, NoFit)
    assert r.needed_bytes == 9 * GIB and r.free_bytes == 8 * GIB
    assert "0.7" in r.reason
    assert _placed(_req(DENSE, 8, min_gpu_layer_ratio=0.6)).gpu_layers == 6


def test_fixed_part_does_not_fit():
    # 1.5 GiB < the 2 GiB fixed part; the least that works is fixed + 1 layer = 3 GiB
    r = place(_req(DENSE, 1.5))
    assert isinstance(r, NoFit) and r.needed_bytes == 3 * GIB


def test_no_layer_fits_beside_the_fixed_part():
    r = place(_req(DENSE, 2.5))                          # 0.5 GiB left < one 1 GiB layer
    assert isinstance(r, NoFit) and r.needed_bytes == 3 * GIB


def test_context_clamped_to_trained_context_times_slots():
    # 100000 > 32768 x 2 -> 65536 tokens x 64 KiB = 4 GiB of KV
    p = _placed(_req(DENSE, 64, context_len=100_000, slots=2))
    assert p.allocated_context_len == 65536
    assert p.vram_kv_and_workspace_bytes == 4 * GIB + 512 * MIB


def test_context_zero_means_trained_context_capped_at_8192():
    assert _placed(_req(DENSE, 64, context_len=0)).allocated_context_len == 8192


def test_dense_model_ignores_moe_offload():
    p = _placed(_req(DENSE, 16, moe_offload=MoeOffload.ON))
    assert p.cpu_expert_layers == 0 and p.pinned_ram_bytes == 0


# ----------------------------------------------------------------- MoE

def test_moe_auto_fits_whole_without_offload():
    p = _placed(_req(MOE, 24, moe_offload=MoeOffload.AUTO))
    assert (p.gpu_layers, p.cpu_expert_layers, p.pinned_ram_bytes) == (10, 0, 0)


def test_moe_auto_offloads_as_few_layers_as_needed():
    # whole = 22 GiB, 16 free: 6 GiB to shed, 1.5 GiB per layer -> ceil(6 / 1.5) = 4 layers
    p = _placed(_req(MOE, 16, moe_offload=MoeOffload.AUTO))
    assert (p.gpu_layers, p.pinned_ram_layers, p.cpu_expert_layers) == (10, 0, 4)
    assert p.vram_weight_bytes == 15 * GIB               # 1 + 20 - 4 x 1.5
    assert p.pinned_ram_bytes == 6 * GIB                 # 4 x 1.5
    assert p.booked_tier1_bytes == 16 * GIB


def test_moe_auto_offloads_all_experts_before_splitting_layers():
    # all experts out: 2 + 10 x 0.5 = 7 GiB > 6 -> split: (6 - 2) / 0.5 = 8 GPU layers
    p = _placed(_req(MOE, 6, moe_offload=MoeOffload.AUTO))
    assert (p.gpu_layers, p.pinned_ram_layers, p.cpu_expert_layers) == (8, 2, 8)
    assert p.vram_weight_bytes == 5 * GIB                # 1 + 8 x 0.5
    assert p.pinned_ram_bytes == 16 * GIB                # 2 x 2 + 8 x 1.5


def test_moe_off_splits_whole_layers():
    # (16 - 2) // 2 = 7 layers
    p = _placed(_req(MOE, 16, moe_offload=MoeOffload.OFF))
    assert (p.gpu_layers, p.pinned_ram_layers, p.cpu_expert_layers) == (7, 3, 0)
    assert p.pinned_ram_bytes == 6 * GIB


def test_moe_on_offloads_every_layer():
    p = _placed(_req(MOE, 24, moe_offload=MoeOffload.ON))
    assert (p.gpu_layers, p.cpu_expert_layers) == (10, 10)
    assert p.vram_weight_bytes == 6 * GIB                # 1 + 10 x 0.5
    assert p.pinned_ram_bytes == 15 * GIB                # 10 x 1.5


def test_moe_auto_is_ignored_on_unified_memory():
    p = _placed(_req(MOE, 16, moe_offload=MoeOffload.AUTO, unified_memory=True))
    assert (p.gpu_layers, p.cpu_expert_layers) == (7, 0)   # as with "off"
    on = _placed(_req(MOE, 24, moe_offload=MoeOffload.ON, unified_memory=True))
    assert on.cpu_expert_layers == 10                      # "on" still applies


def test_moe_needed_bytes_counts_offloaded_layers():
    # 2.2 GiB free < fixed 2 + one expert-less layer 0.5 = 2.5 GiB
    r = place(_req(MOE, 2.2, moe_offload=MoeOffload.AUTO))
    assert isinstance(r, NoFit) and r.needed_bytes == 5 * GIB // 2


# ----------------------------------------------------------------- whole models

def test_non_layered_fits_whole_or_not_at_all():
    whole = ModelShape(weights_bytes=GIB, workspace_bytes=64 * MIB)
    p = _placed(_req(whole, 2))
    assert (p.gpu_layers, p.vram_weight_bytes, p.vram_kv_and_workspace_bytes) == (0, GIB, 64 * MIB)
    assert p.allocated_context_len == 0
    r = place(_req(whole, 1))
    assert isinstance(r, NoFit) and r.needed_bytes == GIB + 64 * MIB


def test_cpu_only_shape_is_placed_whole_with_its_kv():
    cpu = dataclasses.replace(DENSE, gpu_capable=False)
    p = _placed(_req(cpu, 16))
    assert (p.gpu_layers, p.pinned_ram_layers) == (10, 0)
    assert p.booked_tier1_bytes == 12 * GIB
    r = place(_req(cpu, 8))                              # no layer split on a CPU host
    assert isinstance(r, NoFit) and r.needed_bytes == 12 * GIB


def test_beside_a_discrete_gpu_a_cpu_build_books_no_vram():
    # Issue 17: a build that cannot offload on a host whose NVML reports a GPU is placed in
    # host memory: nothing booked in tier 1 (VRAM), its whole footprint in pinned_ram_bytes
    # (11 GiB of weights + 512 MiB KV + 512 MiB workspace), even with no VRAM free.
    cpu = dataclasses.replace(DENSE, gpu_capable=False)
    for free in (16, 0):
        p = _placed(_req(cpu, free, discrete_gpu=True))
        assert p.booked_tier1_bytes == 0 and p.gpu_layers == 0
        assert (p.pinned_ram_layers, p.pinned_ram_bytes) == (10, 12 * GIB)
        assert p.primary_tier is Tier.GPU and p.on_host and p.to_wire()["device"] == "cpu"
        assert p.allocated_context_len == 8192
    whole = ModelShape(weights_bytes=GIB, workspace_bytes=64 * MIB, gpu_capable=False)
    p = _placed(_req(whole, 0, discrete_gpu=True))
    assert (p.booked_tier1_bytes, p.pinned_ram_bytes) == (0, GIB + 64 * MIB)
    # A GPU-capable shape beside the same GPU is booked in VRAM as before.
    assert _placed(_req(DENSE, 16, discrete_gpu=True)).booked_tier1_bytes == 12 * GIB


def test_placement_device_names_where_the_passes_run():
    from hypnos.planner import Accelerator, Hardware, Topology, placement_device
    nvidia = Hardware(Accelerator.NVIDIA, Topology.DISCRETE, 24 * GIB, 64 * GIB)
    metal = Hardware(Accelerator.METAL, Topology.UNIFIED, 0, 64 * GIB)
    cpu = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 64 * GIB)
    on_gpu = _placed(_req(DENSE, 16))
    split = _placed(_req(DENSE, 6))
    assert split.pinned_ram_layers > 0
    assert [placement_device(on_gpu, hw, True) for hw in (nvidia, metal, cpu)] == \
        ["cuda", "metal", "cpu"]
    assert placement_device(split, nvidia, True) == "cuda"
    assert placement_device(on_gpu, nvidia, False) == "cpu"


@pytest.mark.parametrize("free_gib,fits", [(0.5, True), (0.1, False)])
def test_real_catalog_shape_smollm2(free_gib, fits):
    # SmolLM2-135M Q4_1: 98 MB of weights, 8192 x 23040 B = 188.7 MB of KV, ~113 MB workspace
    s = shape_from_arch(98_362_432, num_layers=30, embedding_length=576, head_count_kv=3,
                        head_dim=64, context_length=8192)
    p = place(_req(s, free_gib))
    assert isinstance(p, Placement) is fits
    if fits:
        assert p.gpu_layers == 30
        assert p.booked_tier1_bytes == 98_362_432 + 8192 * 23040 + s.workspace_bytes
