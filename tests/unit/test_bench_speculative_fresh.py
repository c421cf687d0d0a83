"""bench/speculative.py --fresh's pure parts: the fresh prompt set's shape and its fixed
tune/held split, the figures read from each server's reply, the ratios, geometric means and
verdicts against issue #39's targets, which prompts ``--only`` picks and in what order a run
asks them, and the Hypnos config of each server."""
import math
import tomllib

import pytest

from hypnos.bench.speculative_fresh import (CHAT, CONFIGS, WARM_KEY, hypnos_config,
                                            select, session_key, session_order)
from hypnos.bench.speculative_fresh_prompts import FAMILIES, HALVES, KINDS, PROMPTS
from hypnos.bench.speculative_fresh_report import (TARGETS, Ask, PromptResult, ask_of,
                                                   geomean, ratio, summarize, verdict)


def test_every_kind_has_five_prompts_or_more_in_both_halves():
    assert FAMILIES == {"plain": ("free_text", "explanation", "plan"),
                        "copying": ("edit", "refactor", "structured", "again")}
    for family, kinds in FAMILIES.items():
        for kind in kinds:
            mine = [p for p in PROMPTS if p.kind == kind]
            assert len(mine) >= 5, kind
            assert {p.family for p in mine} == {family}
            assert {p.half for p in mine} == set(HALVES), kind
    assert len({p.name for p in PROMPTS}) == len(PROMPTS)
    assert len({p.ask for p in PROMPTS}) == len(PROMPTS)
    assert all(p.ask.strip() for p in PROMPTS)


def test_the_split_is_by_position_in_each_kind():
    """As the module says: even positions (from 0) are tune, odd ones held back."""
    by_name = {p.name: p for p in PROMPTS}
    for kind, written in KINDS.items():
        for i, (slug, ask) in enumerate(written):
            prompt = by_name[f"{kind}/{slug}"]
            assert prompt.ask == ask
            assert prompt.half == ("tune" if i % 2 == 0 else "held")


def test_copying_prompts_carry_what_the_answer_copies():
    for p in PROMPTS:
        if p.kind in ("edit", "refactor", "structured"):
            instruction, _, given = p.ask.partition("\n\n")
            assert instruction and len(given) >= 100, p.name
    short = [p for p in PROMPTS if p.kind == "edit"][:2]        # the ~60-token edits
    assert {p.half for p in short} == {"tune", "held"}
    assert all(len(p.ask) < 400 for p in short)


def test_what_each_server_reports():
    hypnos = {"usage": {"completion_tokens": 120},
              "hypnos_telemetry": {"engine": {"decode_tokens_per_s": 48.0},
                                   "speculative": {"method": "auto:ngram", "drafted": 60,
                                                   "accepted": 45, "n_max": 8}}}
    assert ask_of(hypnos, 3.0) == Ask(120, 3.0, 48.0, "auto:ngram", 60, 45)
    assert ask_of(hypnos, 3.0).rate == 40.0
    quiet = {"usage": {"completion_tokens": 10},
             "hypnos_telemetry": {"engine": {"decode_tokens_per_s": 50.0}}}
    assert ask_of(quiet, 1.0) == Ask(10, 1.0, 50.0)
    llama = {"usage": {"completion_tokens": 100}, "timings": {"predicted_per_second": 52.5}}
    assert ask_of(llama, 2.5) == Ask(100, 2.5, 52.5)


def test_ratio_geomean_and_verdict():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None and ratio(3.0, None) is None
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert geomean([1.2, 1.2, 1.2]) == pytest.approx(1.2)
    assert geomean([]) is None
    assert TARGETS == {"plain": 0.97, "copying": 1.3}
    assert verdict([0.97, 1.2], "plain") == "PASS"
    assert verdict([1.5, 0.96], "plain") == "MISS"           # every prompt, not the mean
    assert verdict([1.3, 2.0], "copying") == "PASS"
    assert verdict([2.0, 1.29], "copying") == "MISS"
    assert verdict([], "copying") is None


def asks(*pairs):
    """Asks of (tokens, wall seconds); decode rate twice the client's."""
    return [Ask(t, w, 2 * t / w) for t, w in pairs]


def test_a_prompts_medians_and_ratios():
    result = PromptResult(PROMPTS[0], {
        "off": asks((100, 2.0), (100, 4.0), (100, 2.5)),        # 50, 25, 40 -> 40
        "auto": asks((100, 1.0), (100, 2.0), (100, 1.25)),      # 100, 50, 80 -> 80
    })
    assert result.rate("off") == 40.0
    assert result.rate("off", decode=True) == 80.0
    assert result.ratio("auto") == 2.0
    assert result.ratio("default") is None
    assert result.drafts("auto") == (0, 0)


def test_geometric_means_per_kind_and_family_each_half_apart():
    def result(name, off, auto):
        prompt = next(p for p in PROMPTS if p.name == name)
        return PromptResult(prompt, {"off": asks((100, 100 / off)),
                                     "default": asks((100, 100 / off)),
                                     "auto": asks((100, 100 / auto))})
    edits = [p.name for p in PROMPTS if p.kind == "edit"]
    plans = [p.name for p in PROMPTS if p.kind == "plan"]
    results = [result(edits[0], 40, 80), result(edits[2], 40, 50),     # tune: 2.0, 1.25
               result(edits[1], 40, 60),                                # held: 1.5
               result(plans[0], 40, 39)]                                # tune: 0.975
    figures = {(f.group, f.half, f.pair): f for f in summarize(results)}
    tune = figures[("edit", "tune", "auto/off")]
    assert tune.count == 2 and tune.family == "copying"
    assert tune.geomean == pytest.approx(math.sqrt(2.0 * 1.25))
    assert tune.least == pytest.approx(1.25) and tune.verdict == "MISS"
    assert figures[("edit", "held", "auto/off")].verdict == "PASS"
    assert figures[("copying", "tune", "auto/off")] .geomean == pytest.approx(
        math.sqrt(2.0 * 1.25))
    assert figures[("plan", "tune", "auto/off")].verdict == "PASS"
    assert figures[("plain", "tune", "default/off")].geomean == pytest.approx(1.0)
    assert figures[("copying", "tune", "default/off")].verdict == "MISS"
    assert ("plan", "held", "auto/off") not in figures                 # no prompt there
    assert ("free_text", "tune", "auto/off") not in figures


def test_which_prompts_and_in_what_order():
    assert [p.kind for p in select(PROMPTS, ["edit"])] == ["edit"] * len(KINDS["edit"])
    assert select(PROMPTS, None) == PROMPTS
    first = PROMPTS[0]
    assert select(PROMPTS, [first.name, "held"]) == [
        p for p in PROMPTS if p is first or p.half == "held"]
    with pytest.raises(ValueError, match="nothing-here"):
        select(PROMPTS, ["edit", "nothing-here"])
    assert sorted(session_order(PROMPTS, 1), key=PROMPTS.index) == PROMPTS
    assert session_order(PROMPTS, 1) == session_order(PROMPTS, 1)
    assert session_order(PROMPTS, 0) != session_order(PROMPTS, 1)


def test_the_hypnos_config_of_each_server(tmp_path):
    def read(name):
        path = hypnos_config(tmp_path / f"{name}.toml", tmp_path, CONFIGS[name], 3)
        return tomllib.loads(path.read_text())
    default = read("default")
    model = default["models"][0]
    assert (model["id"], model["weights_path"], model["slots"]) == (*CHAT, 1)
    assert "speculative" not in model                  # the server's own default
    assert read("off")["models"][0]["speculative"] == "off"
    assert read("auto")["models"][0]["speculative"] == "auto"
    keys = default["server"]["api_keys"]
    assert keys == [session_key(0), session_key(1), session_key(2), WARM_KEY]
