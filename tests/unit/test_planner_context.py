"""The context policy (planner.context): the 4096 fallback, the 8192 cap, the 2048 floor,
and the placement math agreeing with it."""
from hypnos.planner.context import (DEFAULT_CONTEXT_CAP, FALLBACK_CONTEXT,
                                    REQUEST_CONTEXT_FLOOR, context_window, default_per_slot,
                                    funded_context, request_context, tokens_from_chars)
from hypnos.planner.placement import allocated_context
from hypnos.planner.types import ModelShape, PlacementRequest


def test_the_three_numbers():
    assert (FALLBACK_CONTEXT, DEFAULT_CONTEXT_CAP, REQUEST_CONTEXT_FLOOR) == (4096, 8192, 2048)


def test_default_per_slot():
    assert default_per_slot(0) == 4096            # trained context unknown
    assert default_per_slot(32768) == 8192        # capped
    assert default_per_slot(2048) == 2048         # a small trained context stays


def test_funded_context():
    assert funded_context(0, 1, 0) == 4096
    assert funded_context(0, 2, 0) == 8192                    # 4096 per slot
    assert funded_context(0, 4, 131072) == 32768              # 8192 x 4
    assert funded_context(0, 2, 2048) == 4096                 # 2048 x 2
    assert funded_context(6000, 2, 0) == 6000                 # the config's, as it says
    assert funded_context(6000, 2, 0, per_slot_need=5000) == 10000     # raised: 5000 x 2
    assert funded_context(6000, 2, 4096, per_slot_need=5000) == 8192   # trained 4096 x 2
    assert funded_context(6000, 2, 0, per_slot_need=1000) == 6000      # never lowered


def test_context_window():
    assert context_window(0, 1, 0) == 4096
    assert context_window(0, 4, 0) == 4096
    assert context_window(6000, 2, 0) == 3000
    assert context_window(6000, 2, 32768) == 32768            # the trained context


def test_request_context():
    assert request_context(10, 16) == 2048
    assert request_context(3000, 500, media_tokens=576) == 4076
    assert tokens_from_chars(4003) == 1000


def test_placement_uses_the_same_default():
    shape = ModelShape(weights_bytes=1, num_layers=1, layer_bytes=1, kv_bytes_per_token=1,
                       max_context_len=32768)
    assert allocated_context(PlacementRequest(shape, 0, context_len=0)) == 8192
    unknown = ModelShape(weights_bytes=1, num_layers=1, layer_bytes=1, kv_bytes_per_token=1)
    assert allocated_context(PlacementRequest(unknown, 0, context_len=0)) == 4096
    assert PlacementRequest(unknown, 0).context_len == FALLBACK_CONTEXT


def test_fundable_window_narrows_to_what_fits():
    from hypnos.planner.context import fundable_window
    assert fundable_window(32768, lambda n: True) == 32768             # the whole window fits
    assert fundable_window(32768, lambda n: n <= 20000) == 19968       # down to a 256 multiple
    assert fundable_window(32768, lambda n: n <= 2048) == 2048
    assert fundable_window(32768, lambda n: False) == 32768            # the load's to refuse
    assert fundable_window(1024, lambda n: False) == 1024
