"""plan_load: whole -> evict -> partial placement -> process memory cap, with hand-computed
numbers. Every shape has no KV cache and no workspace, so a placement books exactly its
weights on the GPU: a layered shape of 100 MiB non-layer weights + 10 layers x 90 MiB books
100 + 90 x gpu_layers MiB."""
from hypnos.planner.loading import (LoadPlan, NoRoom, OverProcessCap, TooBig, plan_load)
from hypnos.planner.types import (MIB, Budgets, ModelShape, PlacementRequest, Priority,
                                  ResidentModel)

BUDGETS = Budgets(tier1_bytes=1000 * MIB, tier2_bytes=4000 * MIB, unified_memory=False)
LAYERED = ModelShape(weights_bytes=1000 * MIB, num_layers=10, layer_bytes=90 * MIB,
                     non_layer_bytes=100 * MIB)
WHOLE = ModelShape(weights_bytes=1000 * MIB)           # not layered: all or nothing


def request(shape=LAYERED, **kw):
    # tier1_free_bytes is ignored by plan_load (it sets it): 0 proves it.
    return PlacementRequest(shape, tier1_free_bytes=0, discrete_gpu=True, **kw)


def resident(mid, mib, leased=False, priority=Priority.NORMAL):
    return ResidentModel(mid, priority, mib * MIB, reload_estimate_ms=100.0,
                         requests_per_minute=1.0, leased=leased)


def test_empty_tier1_places_the_whole_model_and_evicts_nothing():
    plan = plan_load(request(), [], BUDGETS, rss=0, cap=None)
    assert isinstance(plan, LoadPlan)
    assert plan.placement.gpu_layers == 10 and plan.placement.pinned_ram_layers == 0
    assert plan.placement.booked_tier1_bytes == 1000 * MIB       # 100 + 10 x 90
    assert plan.evict == () and not plan.partial


def test_idle_residents_are_evicted_for_the_whole_placement():
    # free = 1000 - 300 - 300 = 400; the whole model needs 1000: evicting both frees 1000.
    plan = plan_load(request(), [resident("a", 300), resident("b", 300)], BUDGETS,
                     rss=0, cap=None)
    assert plan.placement.gpu_layers == 10 and not plan.partial
    assert set(plan.evict) == {"a", "b"}


def test_partial_placement_beside_a_leased_model():
    # "a" (400, leased) stays: free = 1000 - 400 - 200 = 400, freeable = 400 + 200 ("b") = 600.
    # The whole model (1000) cannot fit; in 600: 100 fixed + (600 - 100) // 90 = 5 layers,
    # booking 100 + 5 x 90 = 550, which needs "b" evicted (400 + 200 >= 550).
    plan = plan_load(request(), [resident("a", 400, leased=True), resident("b", 200)],
                     BUDGETS, rss=0, cap=None)
    assert isinstance(plan, LoadPlan) and plan.partial
    p = plan.placement
    assert (p.gpu_layers, p.pinned_ram_layers) == (5, 5)
    assert p.vram_weight_bytes == 550 * MIB and p.booked_tier1_bytes == 550 * MIB
    assert p.pinned_ram_bytes == 450 * MIB                        # 5 host layers x 90
    assert plan.evict == ("b",)


def test_partial_placement_without_eviction_when_the_free_room_suffices():
    # "a" (300, leased): free = freeable = 700 -> (700 - 100) // 90 = 6 layers, 640 booked.
    plan = plan_load(request(), [resident("a", 300, leased=True)], BUDGETS, rss=0, cap=None)
    assert plan.partial and plan.evict == ()
    assert plan.placement.gpu_layers == 6 and plan.placement.booked_tier1_bytes == 640 * MIB


def test_no_room_when_even_the_partial_placement_cannot_fit():
    # "a" (950, leased): freeable = 50 < the 100 MiB of non-layer weights.
    refusal = plan_load(request(), [resident("a", 950, leased=True)], BUDGETS,
                        rss=0, cap=None)
    assert refusal == NoRoom(needed_bytes=1000 * MIB, freeable_bytes=50 * MIB)


def test_min_gpu_layer_ratio_refuses_a_too_small_partial_placement():
    # As in the partial test only 5 of 10 layers fit; a ratio of 0.6 asks for 6.
    refusal = plan_load(request(min_gpu_layer_ratio=0.6),
                        [resident("a", 400, leased=True), resident("b", 200)], BUDGETS,
                        rss=0, cap=None)
    assert refusal == NoRoom(needed_bytes=1000 * MIB, freeable_bytes=600 * MIB)


def test_realtime_pinned_counts_as_unevictable():
    refusal = plan_load(request(WHOLE), [resident("rt", 600, priority=Priority.REALTIME_PINNED)],
                        BUDGETS, rss=0, cap=None)
    # A whole-model shape has no partial placement: 1000 needed, 400 freeable.
    assert refusal == NoRoom(needed_bytes=1000 * MIB, freeable_bytes=400 * MIB)


def test_too_big_for_an_empty_tier1():
    small = Budgets(tier1_bytes=900 * MIB, tier2_bytes=0, unified_memory=False)
    refusal = plan_load(request(WHOLE), [], small, rss=0, cap=None)
    assert isinstance(refusal, TooBig)
    assert (refusal.needed_bytes, refusal.tier1_bytes) == (1000 * MIB, 900 * MIB)


def test_process_memory_cap_counts_what_the_victims_free():
    # Evicting "b" (300) for the whole model (1000): projected = 2000 - 300 + 1000 = 2700.
    residents = [resident("b", 300)]
    refusal = plan_load(request(WHOLE), residents, BUDGETS, rss=2000 * MIB, cap=2600 * MIB)
    assert refusal == OverProcessCap(projected_bytes=2700 * MIB, cap_bytes=2600 * MIB)
    plan = plan_load(request(WHOLE), residents, BUDGETS, rss=2000 * MIB, cap=2700 * MIB)
    assert isinstance(plan, LoadPlan) and plan.evict == ("b",)    # at the cap is allowed


def test_process_memory_cap_applies_to_the_partial_placement():
    # The partial placement books 550 and evicts "b" (200): 1000 - 200 + 550 = 1350.
    residents = [resident("a", 400, leased=True), resident("b", 200)]
    refusal = plan_load(request(), residents, BUDGETS, rss=1000 * MIB, cap=1300 * MIB)
    assert refusal == OverProcessCap(projected_bytes=1350 * MIB, cap_bytes=1300 * MIB)
    assert plan_load(request(), residents, BUDGETS, rss=1000 * MIB, cap=1350 * MIB).partial


def test_no_cap_means_no_check():
    for cap in (None, 0):
        plan = plan_load(request(WHOLE), [], BUDGETS, rss=10**15, cap=cap)
        assert isinstance(plan, LoadPlan)
