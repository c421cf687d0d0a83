"""planner.process_memory: the process memory no booking covers, taken off tier 1 where tier 1
is host memory (issue 21: 790 MiB booked against a 2,019 MiB footprint), and the process cap
against the measured footprint. Hand-computed, no model."""
from hypnos.planner.loading import LoadPlan, NoRoom, plan_load
from hypnos.planner.process_memory import (ProcessMemory, over_process_cap, process_memory,
                                           tier1_unbooked, usable_budgets)
from hypnos.planner.types import (GIB, MIB, Accelerator, Budgets, Hardware, ModelShape,
                                  Placement, PlacementRequest, Priority, RemoteShare,
                                  ResidentModel, Tier, Topology)

CPU = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 16 * GIB)
MAC = Hardware(Accelerator.METAL, Topology.UNIFIED, 0, 16 * GIB)
GPU = Hardware(Accelerator.NVIDIA, Topology.DISCRETE, 24 * GIB, 64 * GIB)
SIMULATED_CPU = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 16 * GIB, simulated=True)


def on_gpu(vram_mib, host_mib=0):
    return Placement(Tier.GPU, vram_weight_bytes=vram_mib * MIB,
                     pinned_ram_bytes=host_mib * MIB)


def test_the_bookings_in_process_memory_depend_on_where_tier_1_is():
    tier1 = [on_gpu(300), on_gpu(200, host_mib=50)]
    # CPU only / unified: tier 1 is host memory: 300 + 200 + the host part 50 + tier 2 100.
    assert process_memory(2000 * MIB, Topology.CPU_ONLY, tier1, 100 * MIB).booked_bytes == \
        650 * MIB
    assert process_memory(2000 * MIB, Topology.UNIFIED, tier1, 100 * MIB).booked_bytes == \
        650 * MIB
    # Beside a GPU the tier-1 bytes are VRAM: only the host part and tier 2 (50 + 100).
    assert process_memory(2000 * MIB, Topology.DISCRETE, tier1, 100 * MIB).booked_bytes == \
        150 * MIB
    # Parked KV states are host memory everywhere (their own cap books them).
    assert process_memory(2000 * MIB, Topology.DISCRETE, tier1, 100 * MIB,
                          parked_bytes=30 * MIB).booked_bytes == 180 * MIB


def test_a_model_split_across_rpc_workers_books_nothing_in_this_process():
    """It runs in a child process of its own (engines/llama/split.py): its local layers are
    that child's memory, not the server's."""
    split = Placement(Tier.GPU, vram_weight_bytes=200 * MIB,
                      remote=(RemoteShare("127.0.0.1:50052", 10, 20, 400 * MIB, True),))
    assert process_memory(1000 * MIB, Topology.CPU_ONLY, [on_gpu(300), split],
                          0).booked_bytes == 300 * MIB


def test_unbooked_is_the_footprint_beyond_the_bookings_never_negative():
    # The figures: 2,019 MiB resident, 790 MiB booked.
    assert ProcessMemory(2019 * MIB, 790 * MIB).unbooked_bytes == 1229 * MIB
    assert ProcessMemory(500 * MIB, 790 * MIB).unbooked_bytes == 0   # over-booked


def test_tier1_loses_the_unbooked_memory_only_where_it_is_host_memory():
    memory = ProcessMemory(2019 * MIB, 790 * MIB)
    assert tier1_unbooked(CPU, memory) == 1229 * MIB
    assert tier1_unbooked(MAC, memory) == 1229 * MIB
    assert tier1_unbooked(GPU, memory) == 0                # tier 1 is VRAM there
    assert tier1_unbooked(SIMULATED_CPU, memory) == 0      # another machine's budgets


def test_usable_budgets_take_it_off_tier_1_only():
    b = Budgets(tier1_bytes=8 * GIB, tier2_bytes=4 * GIB, unified_memory=False)
    assert usable_budgets(b, 1 * GIB) == Budgets(7 * GIB, 4 * GIB, False)
    assert usable_budgets(b, 9 * GIB).tier1_bytes == 0
    assert usable_budgets(b, -5) == b


def test_a_load_that_fitted_the_booked_figures_no_longer_fits_beside_the_unbooked_memory():
    # Tier 1 1000 MiB, a resident leased model booking 300: 700 free by the bookings, a
    # 600 MiB model fits. With 200 MiB of the process unbooked only 500 are free: no room.
    shape = ModelShape(weights_bytes=600 * MIB)
    request = PlacementRequest(shape, tier1_free_bytes=0)
    budgets = Budgets(tier1_bytes=1000 * MIB, tier2_bytes=0, unified_memory=False)
    busy = [ResidentModel("a", Priority.NORMAL, 300 * MIB, 100.0, 1.0, leased=True)]
    assert isinstance(plan_load(request, busy, budgets, rss=0, cap=None), LoadPlan)
    refused = plan_load(request, busy, usable_budgets(budgets, 200 * MIB), rss=0, cap=None)
    assert refused == NoRoom(needed_bytes=600 * MIB, freeable_bytes=500 * MIB)


def test_the_process_cap_is_checked_against_the_measured_footprint():
    assert over_process_cap(900 * MIB, 101 * MIB, 1000 * MIB)
    assert not over_process_cap(900 * MIB, 100 * MIB, 1000 * MIB)
    assert not over_process_cap(10 * GIB, 10 * GIB, None)
    assert not over_process_cap(10 * GIB, 10 * GIB, 0)
