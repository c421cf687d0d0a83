"""The MTP drafter's bookkeeping (``engines/llama/speculative/mtp_state``), model-free: which
hidden state feeds each MTP row, where a sequence can draft from after a decode and after a
rollback, and the batches the feed refuses."""
import numpy as np
import pytest

from hypnos.engines.llama.speculative.mtp_state import (KEEP_ROWS, SeqState, group_rows,
                                                        plan_feed)

D = 4


def rows(*values):
    return np.array([[v] * D for v in values], dtype=np.float32)


def test_rows_are_grouped_by_sequence_in_batch_order():
    groups = group_rows([0, 1, 0, 1], [5, 9, 6, 10])
    assert [(g.seq, g.indices, g.positions) for g in groups] == [
        (0, [0, 2], [5, 6]), (1, [1, 3], [9, 10])]


def test_a_sequence_with_a_gap_in_its_positions_is_refused():
    with pytest.raises(ValueError, match="position 7 follows 5"):
        group_rows([0, 0], [5, 7])


def test_each_row_gets_the_hidden_state_of_the_position_before():
    state = SeqState(D)
    hidden = rows(1, 2, 3)
    cut, feed = plan_feed(state, group_rows([0, 0, 0], [0, 1, 2])[0], [7, 8, 9], hidden)
    assert cut is None
    assert [(r.token, r.pos) for r in feed] == [(7, 0), (8, 1), (9, 2)]
    assert [float(r.hidden[0]) for r in feed] == [0.0, 1.0, 2.0]    # position 0 has none
    state.decoded([0, 1, 2], hidden)
    assert (state.ready, state.ready_pos, state.kv_len) == (True, 3, 3)
    _, feed = plan_feed(state, group_rows([0], [3])[0], [10], rows(4))
    assert float(feed[0].hidden[0]) == 3.0            # the last decode's last row


def test_stale_mtp_rows_at_the_batch_position_are_cut_first():
    state = SeqState(D)
    state.decoded([0, 1, 2, 3], rows(1, 2, 3, 4))
    cut, feed = plan_feed(state, group_rows([0], [2])[0], [5], rows(9))
    assert cut == 2 and float(feed[0].hidden[0]) == 2.0


def test_rollback_into_the_last_rows_can_draft_from_there():
    state = SeqState(D)
    state.decoded([10, 11, 12, 13, 14], rows(1, 2, 3, 4, 5))
    state.rollback(13)                 # rows 13, 14 rejected
    assert (state.ready, state.ready_pos, state.kv_len) == (True, 13, 13)
    assert float(state.pending[0]) == 3.0


def test_rollback_past_the_known_rows_stops_drafting_until_the_next_decode():
    state = SeqState(D)
    state.decoded([10, 11], rows(1, 2))
    state.rollback(5)
    assert not state.ready and state.kv_len == 5
    assert float(state.hidden_before(5)[0]) == 0.0
    state.decoded([5], rows(7))
    assert (state.ready, state.ready_pos) == (True, 6)


def test_rollback_to_zero_forgets_everything():
    state = SeqState(D)
    state.decoded([0, 1], rows(1, 2))
    state.rollback(0)
    assert (state.ready, state.ready_pos, state.kv_len, state.positions) == (False, 0, 0, [])
    assert not state.pending.any()


def test_only_the_last_rows_of_a_long_decode_are_kept():
    state = SeqState(D)
    n = KEEP_ROWS + 10
    state.decoded(list(range(n)), rows(*range(n)))
    assert len(state.positions) == KEEP_ROWS and state.positions[-1] == n - 1
    state.rollback(5)
    assert not state.ready
