"""eviction_order / plan_eviction on hand-built pools."""
from __future__ import annotations

from hypnos.planner import GIB, Priority, ResidentModel, eviction_order, plan_eviction


def _m(model_id, priority, booked_gib, reload_ms=0.0, rpm=0.0, leased=False):
    return ResidentModel(model_id, priority, booked_gib * GIB, reload_ms, rpm, leased)


POOL = [
    _m("a", Priority.LOW, 4, reload_ms=1000, rpm=10),     # cost 10000
    _m("b", Priority.LOW, 2, reload_ms=500, rpm=1),       # cost 500
    _m("c", Priority.NORMAL, 8, reload_ms=100, rpm=0),    # cost 0
    _m("d", Priority.HIGH, 1),                            # cost 0
    _m("e", Priority.REALTIME_PINNED, 3),                 # never
    _m("f", Priority.NORMAL, 5, leased=True),             # leased: never
    _m("g", Priority.LOW, 6, reload_ms=250, rpm=2),       # cost 500, ties b, books more
]


def test_order_priority_then_cost_then_bigger_first():
    # low: g (500, 6 GiB), b (500, 2 GiB), a (10000); then normal c; then high d.
    assert eviction_order(POOL) == ["g", "b", "a", "c", "d"]


def test_order_excludes_leased_and_realtime_pinned():
    order = eviction_order(POOL)
    assert "e" not in order and "f" not in order


def test_cheap_high_priority_still_goes_after_expensive_low_priority():
    pool = [_m("hi", Priority.HIGH, 1), _m("lo", Priority.LOW, 1, reload_ms=9e9, rpm=99)]
    assert eviction_order(pool) == ["lo", "hi"]


def test_full_ties_break_by_id():
    pool = [_m("z", Priority.NORMAL, 1), _m("m", Priority.NORMAL, 1)]
    assert eviction_order(pool) == ["m", "z"]


def test_plan_nothing_to_evict_when_it_fits():
    plan = plan_eviction(3 * GIB, 3 * GIB, POOL)
    assert plan.evict == () and plan.fits and plan.shortfall_bytes == 0


def test_plan_shortest_prefix():
    # need 10 GiB, 3 free: g frees 6 (9 < 10), then b frees 2 (11 >= 10): stop there.
    plan = plan_eviction(10 * GIB, 3 * GIB, POOL)
    assert plan.evict == ("g", "b")
    assert plan.fits


def test_plan_exact_boundary_stops_at_first_model():
    # 3 free + 6 from g = 9 = needed
    assert plan_eviction(9 * GIB, 3 * GIB, POOL).evict == ("g",)


def test_plan_shortfall_when_evicting_everything_is_not_enough():
    # evictable: 6 + 2 + 4 + 8 + 1 = 21 GiB; 3 free + 21 = 24 < 40 -> 16 GiB short
    plan = plan_eviction(40 * GIB, 3 * GIB, POOL)
    assert plan.fits is False
    assert plan.evict == ()
    assert plan.shortfall_bytes == 16 * GIB
