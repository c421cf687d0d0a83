"""bench/spec_replay.py's pure parts: step costs read between the sizes measured, an answer
replayed through the engine's own default drafter as the decode loop drives it (every token
of the answer taken once, a step per draft), a question asked again drafting from the first
answer, and the recorded answers file that the GPU check replays (one answer per fresh
prompt, every token named). No model: token ids stand for themselves."""
import json

import pytest

from hypnos.bench.spec_replay import (ANSWERS, Replayed, StepCosts, default_figures, replay,
                                      replay_set)
from hypnos.bench.spec_step_costs import costs_record
from hypnos.bench.speculative_fresh_prompts import PROMPTS, FreshPrompt
from hypnos.engines.llama.speculative.choose import Speculation, parse_spec

FLAT = StepCosts({1: 1.0, 64: 1.0}, 0.02)          # a drafted position costs nothing
CHEAP = StepCosts({1: 1.0, 4: 1.1, 16: 1.3, 64: 2.0}, 0.002)


def spec():
    return Speculation(parse_spec("auto"), can_rollback=True, spelling=lambda t: t)


def test_costs_run_straight_between_the_sizes_measured_and_flat_past_them():
    costs = StepCosts({1: 1.0, 4: 2.5, 8: 3.0}, 0.03)
    assert costs.of(1) == 1.0 and costs.of(4) == 2.5
    assert costs.of(2) == pytest.approx(1.5) and costs.of(6) == pytest.approx(2.75)
    assert costs.of(64) == 3.0 and costs.of(0) == 1.0


def test_a_cost_record_reads_back_as_the_costs_it_was_made_of():
    record = json.loads(json.dumps(costs_record({1: 0.02, 4: 0.05, 16: 0.08}, ANSWERS, 2,
                                                where="here")))
    costs = StepCosts.from_record(record)
    assert costs.plain_s == pytest.approx(0.02)
    assert costs.steps == pytest.approx({1: 1.0, 4: 2.5, 16: 4.0})


def test_a_copied_answer_is_taken_in_fewer_steps_and_every_token_once():
    body = list(range(1000, 1200))
    prompt = [1, 2, 3] + body + [4, 5]
    done = replay(spec(), "p", prompt, body, FLAT)
    assert done.tokens == len(body)
    assert 0 < done.accepted <= done.drafted
    # each step takes the tokens its draft got right and one more (the last maybe none more)
    assert len(body) - done.accepted <= done.steps <= len(body) - done.accepted + 1
    assert done.steps < len(body) / 2


def test_an_answer_that_copies_nothing_costs_a_step_a_token():
    done = replay(spec(), "p", [1, 2, 3, 4, 5, 6], list(range(2000, 2100)), CHEAP)
    assert done.drafted == 0 and done.steps == 100.0
    ask = done.ask(CHEAP.plain_s, True)
    assert ask.tokens == 100 and ask.decode_rate == pytest.approx(1 / CHEAP.plain_s)


def test_a_draft_the_answer_leaves_is_cut_where_they_differ():
    body = list(range(3000, 3120))
    answer = body[:60] + [9] + body[61:]          # one token differs from the prompt's
    done = replay(spec(), "p", [7] + body + [8], answer, FLAT)
    assert done.tokens == len(answer)
    assert done.accepted < done.drafted          # the draft past the change was refused
    assert len(answer) - done.accepted <= done.steps <= len(answer) - done.accepted + 1


def test_a_question_asked_again_drafts_its_first_answer_and_the_report_judges_it():
    again = FreshPrompt("again/q", "copying", "again", "tune", "?")
    plain = FreshPrompt("free_text/s", "plain", "free_text", "tune", "!")
    record = {"answers": {again.name: {"prompt": [1, 2, 3, 4, 5, 6, 7, 8],
                                       "answer": list(range(5000, 5150))},
                          plain.name: {"prompt": [1, 2, 3, 9, 9, 9, 9, 9],
                                       "answer": list(range(6000, 6150))}},
              "names": {str(t): t for t in [1, 2, 3, 4, 5, 6, 7, 8, 9, *range(5000, 5150),
                                            *range(6000, 6150)]}}
    results = replay_set(record, [again, plain], CHEAP, runs=2)
    by = {r.prompt.name: r for r in results}
    assert by[again.name].ratio("default") > 1.5
    assert by[plain.name].ratio("default") == pytest.approx(1.0)
    assert len(by[again.name].asks["default"]) == 2
    figures = {(f.group, f.half): f for f in default_figures(results)}
    assert figures[("copying", "tune")].verdict == "PASS"
    assert figures[("plain", "tune")].verdict == "PASS"
    assert all(f.pair == "default/off" for f in figures.values())


def test_a_replayed_answer_reads_as_a_request_of_its_decode_time():
    ask = Replayed(tokens=50, steps=25.0, drafted=40, accepted=25).ask(0.01, True)
    assert ask.wall_s == pytest.approx(0.25) and ask.rate == pytest.approx(200.0)
    assert (ask.method, ask.drafted, ask.accepted) == ("ngram", 40, 25)


def test_the_recorded_answers_cover_the_fresh_set_and_name_every_token():
    record = json.loads(ANSWERS.read_text())
    assert set(record["answers"]) == {p.name for p in PROMPTS}
    for p in PROMPTS:
        got = record["answers"][p.name]
        assert (got["kind"], got["half"]) == (p.kind, p.half)
        assert got["prompt"] and got["answer"]
        assert len(got["answer"]) <= record["tokens"]
    seen = {t for a in record["answers"].values() for t in a["prompt"] + a["answer"]}
    assert {int(t) for t in record["names"]} == seen
