"""bench/spec_bounds.py's pure parts: the cheapest schedule of right drafts under a cost
table, the two lookups it is bounded by (any earlier place; the latest place of the longest
repeated suffix), and the replay with a perfect stop rule (no draft ever refused). No model:
token ids stand for themselves."""
import json
import math

import pytest

from hypnos.bench.spec_bounds import (DRAFT_MAX, bounds_of, cheapest, copied_runs,
                                      latest_runs)
from hypnos.bench.spec_replay import StepCosts, replay
from hypnos.engines.llama.speculative.choose import Speculation, parse_spec


def test_nothing_to_draft_costs_a_step_a_token():
    assert cheapest([0] * 7, lambda b: 1.0) == 7.0


def test_free_positions_take_an_answer_in_as_few_steps_as_the_runs_allow():
    flat = lambda b: 1.0  # noqa: E731
    assert cheapest([9] * 10, flat) == 1.0              # one step: 9 drafted and its own
    assert cheapest([4] * 10, flat) == 2.0              # 5 tokens a step
    # never more than DRAFT_MAX drafted in a step, however long the run
    assert cheapest([DRAFT_MAX + 50] * 200, flat) == math.ceil(200 / (DRAFT_MAX + 1))


def test_a_position_that_costs_a_step_gains_nothing_and_a_dear_one_is_not_used():
    assert cheapest([5] * 12, lambda b: float(b)) == 12.0
    assert cheapest([5] * 12, lambda b: 2.0 * b - 1) == 12.0


def test_the_schedule_takes_the_long_run_where_it_stands():
    # runs of 3 only at position 0: one step of 4 positions, then a step a token
    cost = lambda b: 1.0 + 0.25 * (b - 1)  # noqa: E731
    assert cheapest([3, 0, 0, 0, 0, 0], cost) == pytest.approx(1.75 + 2.0)


def test_copied_runs_find_the_answer_anywhere_before_it():
    assert copied_runs([1, 2, 3], [1, 2, 3, 4, 1, 2]) == [3, 2, 1, 0, 2, 1]
    # a run may come from the answer itself, never from past its own end
    assert copied_runs([9], [5, 6, 5, 6, 5]) == [0, 0, 2, 2, 1]


def test_latest_runs_copy_after_the_longest_repeated_suffix_the_latest_on_a_tie():
    # context ends "4 1": "4 1 2" earlier wins over the later "9 1 3"
    assert latest_runs([4, 1, 2, 9, 1, 3, 4, 1], [2]) == [1]
    # a tie of one token: the latest place ("1 3"), and the answer agrees for a token
    assert latest_runs([5, 1, 2, 9, 1, 3, 1], [3, 8]) == [1, 0]
    # a last token never seen before drafts nothing
    assert latest_runs([1, 2, 3], [4, 5]) == [0, 0]


def test_latest_never_beats_copied():
    prompt = [(i * 37) % 11 for i in range(60)]
    answer = [(i * 13) % 11 for i in range(80)]
    latest, copied = latest_runs(prompt, answer), copied_runs(prompt, answer)
    assert all(a <= b for a, b in zip(latest, copied, strict=True))
    cost = lambda b: 1.0 + 0.3 * (b - 1)  # noqa: E731
    assert cheapest(copied, cost) <= cheapest(latest, cost) < len(answer)


def test_bounds_rows_are_ratios_to_plain_steps():
    record = json.loads(json.dumps({"answers": {"structured/x": {
        "kind": "structured", "half": "tune", "prompt": [1, 2, 3, 4],
        "answer": [1, 2, 3, 4, 1, 2, 3, 4]}}}))
    row, = bounds_of(record, ["structured/x"], lambda b: 1.0, {"structured/x": 1.1},
                     {"structured/x": 1.2})
    assert (row.tokens, row.drafter, row.stopped) == (8, 1.1, 1.2)
    # 5 tokens (4 copied from the prompt and the step's own), then the last 3: 2 steps
    assert row.copied == 4.0 and row.latest <= row.copied


def test_a_perfect_stop_never_refuses_a_draft_and_takes_every_token_once():
    body = list(range(3000, 3120))
    answer = body[:60] + [9] + body[61:]          # the copy breaks once
    costs = StepCosts({1: 1.0, 64: 1.0}, 0.02)          # a step is a step, whatever its size
    spec = lambda: Speculation(parse_spec("auto"), can_rollback=True,  # noqa: E731
                               spelling=lambda t: t)
    plain = replay(spec(), "p", [7] + body + [8], answer, costs)
    stopped = replay(spec(), "p", [7] + body + [8], answer, costs, perfect_stop=True)
    assert plain.accepted < plain.drafted
    assert stopped.tokens == len(answer) and 0 < stopped.accepted == stopped.drafted
    assert len(answer) - stopped.accepted <= stopped.steps <= len(answer) - stopped.accepted + 1
