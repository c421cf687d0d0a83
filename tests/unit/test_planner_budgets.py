"""derive_budgets / hardware_for: hand-computed budgets for each kind of machine; what a kept
engine (tier 2 where the engine computes from host memory) books in each tier."""
from __future__ import annotations

from hypnos.planner import (GIB, MIB, Accelerator, Hardware, ModelShape, Placement, Tier,
                            Topology, derive_budgets, hardware_for, kept_engine_booking,
                            kv_park_cap, metal_working_set, tier2_keeps_engine)


def _discrete(vram: int, ram: int) -> Hardware:
    return Hardware(Accelerator.NVIDIA, Topology.DISCRETE, vram, ram)


def _unified(ram: int, vram: int = 0) -> Hardware:
    return Hardware(Accelerator.METAL, Topology.UNIFIED, vram, ram)


def test_discrete_gpu_matches_the_spec_example():
    b = derive_budgets(_discrete(24 * GIB, 64 * GIB))
    # tier 1 = 24 GiB - 512 MiB = 25769803776 - 536870912 = 25232932864 (spec's advisor example)
    assert b.tier1_bytes == 25_232_932_864
    # tier 2 = 64 GiB // 2 = 32 GiB = 34359738368
    assert b.tier2_bytes == 34_359_738_368
    assert b.unified_memory is False


def test_discrete_gpu_smaller_than_the_reserve_gets_nothing():
    b = derive_budgets(_discrete(256 * MIB, 8 * GIB))
    assert b.tier1_bytes == 0          # 256 MiB - 512 MiB < 0 -> 0
    assert b.tier2_bytes == 4 * GIB


def test_metal_working_set_is_two_thirds_up_to_36_gib_and_three_quarters_above():
    assert metal_working_set(36 * GIB) == 24 * GIB             # 36 x 2/3
    assert metal_working_set(48 * GIB) == 36 * GIB             # 48 x 3/4
    assert metal_working_set(32 * GIB) == 32 * GIB * 2 // 3    # 22906492245


def test_unified_32_gib():
    b = derive_budgets(_unified(32 * GIB))
    # working set 32 GiB x 2/3 = 34359738368 x 2 // 3 = 22906492245; RAM - 4 GiB = 28 GiB: larger
    assert b.tier1_bytes == 22_906_492_245
    # tier 2 = 34359738368 - 4294967296 - 22906492245 = 7158278827 (< 16 GiB cap)
    assert b.tier2_bytes == 7_158_278_827
    assert b.unified_memory is True


def test_unified_64_gib_uses_three_quarters():
    b = derive_budgets(_unified(64 * GIB))
    assert b.tier1_bytes == 48 * GIB   # 64 x 3/4 = 48 < 60 = 64 - 4
    assert b.tier2_bytes == 12 * GIB   # 64 - 4 - 48


def test_unified_small_machine_is_capped_by_the_os_reserve():
    b = derive_budgets(_unified(8 * GIB))
    # 2/3 x 8 GiB = 5.33 GiB > 8 - 4 = 4 GiB: the reserve wins; nothing left for tier 2
    assert b.tier1_bytes == 4 * GIB
    assert b.tier2_bytes == 0


def test_unified_ignores_vram_bytes():
    assert derive_budgets(_unified(32 * GIB, vram=99 * GIB)) == derive_budgets(_unified(32 * GIB))


def test_cpu_only_half_and_quarter_of_ram():
    b = derive_budgets(Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 16 * GIB))
    assert (b.tier1_bytes, b.tier2_bytes, b.unified_memory) == (8 * GIB, 4 * GIB, False)


def test_hardware_for_picks_the_topology():
    assert hardware_for(24 * GIB, 64 * GIB, False).topology is Topology.DISCRETE
    assert hardware_for(24 * GIB, 64 * GIB, True).topology is Topology.UNIFIED
    assert hardware_for(0, 64 * GIB, False).topology is Topology.CPU_ONLY
    assert hardware_for(None, 64 * GIB, False).accelerator is Accelerator.CPU


def test_tier2_keeps_the_engine_where_it_computes_from_host_memory():
    assert tier2_keeps_engine(Topology.CPU_ONLY) and tier2_keeps_engine(Topology.UNIFIED)
    assert not tier2_keeps_engine(Topology.DISCRETE)      # kept weights would hold VRAM


def test_kept_engine_booking_moves_the_weights_between_tiers():
    # SmolLM2-135M Q4_1 at 512 tokens, 1 slot (its GGUF's figures): weights 96,576,768 B;
    # KV 23,040 B/token x 512 = 11,796,480 B; workspace 145,227,776 B.
    shape = ModelShape(weights_bytes=96_576_768, kv_bytes_per_token=23_040,
                       workspace_bytes=145_227_776)
    placement = Placement(primary_tier=Tier.GPU, vram_weight_bytes=96_576_768,
                          vram_kv_and_workspace_bytes=11_796_480 + 145_227_776)
    b = kept_engine_booking(shape, placement)
    assert b.tier2_bytes == 96_576_768                    # in tier 2: the weights alone
    assert b.tier1_bytes == 253_601_024                   # 96,576,768 + 157,024,256
    assert b.promotion_bytes == 157_024_256               # the context: KV + workspace
    # A placement booking less than the weights (host layers beside a GPU) allocates 0 more.
    assert kept_engine_booking(shape, Placement(primary_tier=Tier.GPU)).promotion_bytes == 0


def test_kv_park_cap_is_the_config_else_4_gib_at_most_an_eighth_of_the_ram():
    assert kv_park_cap(None, 64 * GIB) == 4 * GIB          # 64 GiB / 8 = 8 GiB > 4 GiB
    assert kv_park_cap(None, 16 * GIB) == 2 * GIB          # 16 GiB / 8
    assert kv_park_cap(None, 1000 * MIB) == 125 * MIB      # a small simulated host
    assert kv_park_cap(8 * GIB, 16 * GIB) == 8 * GIB       # set in the config: as set
    assert kv_park_cap(0, 16 * GIB) == 0
