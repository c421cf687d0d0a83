"""bench/speculative.py's pure parts: the drafts each server reports, a prediction the server
ignored read as refused (so the bench prints "not available" rather than a false figure),
the Hypnos config per method, which prompt sets each method runs, and the prompt sets."""
import tomllib

import pytest

from hypnos.bench.speculative import (DRAFT, METHODS, TARGET, Refused, drafts_of,
                                      hypnos_config, sets_for)
from hypnos.bench.speculative_prompts import SETS


def test_drafts_as_each_server_reports_them():
    assert drafts_of({"timings": {"draft_n": 187, "draft_n_accepted": 156}}, False) == (187, 156)
    assert drafts_of({"timings": {"predicted_per_second": 12.8}}, False) == (0, 0)
    hypnos = {"hypnos_telemetry": {"speculative": {"method": "ngram", "drafted": 40,
                                                   "accepted": 31, "n_max": 4}}}
    assert drafts_of(hypnos, False) == (40, 31)
    assert drafts_of({"hypnos_telemetry": {}}, False) == (0, 0)
    predicted = {"usage": {"completion_tokens_details": {
        "accepted_prediction_tokens": 90, "rejected_prediction_tokens": 10}}}
    assert drafts_of(predicted, True) == (100, 90)


def test_a_prediction_the_server_ignored_is_refused():
    with pytest.raises(Refused):
        drafts_of({"usage": {"completion_tokens": 5}, "hypnos_telemetry": {}}, True)


def test_the_hypnos_config_of_each_method(tmp_path):
    def read(method):
        return tomllib.loads(hypnos_config(tmp_path / f"{method}.toml", tmp_path,
                                           METHODS[method][1] or '"off"').read_text())
    off = read("none")
    assert [m["id"] for m in off["models"]] == [TARGET[0]]
    assert off["models"][0]["speculative"] == "off"      # said: the default is "auto"
    assert read("ngram")["models"][0]["speculative"] == "ngram"
    assert read("auto")["models"][0]["speculative"] == "auto"
    draft = read("draft")
    assert draft["models"][0]["speculative"] == {"draft": DRAFT[0], "n_max": 4, "lookup": False}
    assert [m["id"] for m in draft["models"]] == [TARGET[0], DRAFT[0]]
    both = read("draft+ngram")                           # a draft behind prompt lookup
    assert both["models"][0]["speculative"] == {"draft": DRAFT[0], "n_max": 4}
    assert "ngram-mod,draft-simple" in METHODS["draft+ngram"][0]
    assert read("prediction")["models"][0]["speculative"] == "off"   # the request drafts


def test_which_sets_each_method_runs():
    everything = list(SETS)
    assert sets_for("none", everything) == ["code", "story", "edit"]
    assert sets_for("prediction", everything) == ["edit"]
    assert sets_for("ngram", everything) == sets_for("draft", everything) == ["code", "story"]
    assert sets_for("prediction", ["code"]) == []


def test_the_prompt_sets():
    assert {k: len(v) for k, v in SETS.items()} == {"code": 3, "story": 2, "edit": 3}
    for prompt in SETS["code"]:
        block = prompt["ask"].split("\n\n", 1)[1]
        assert 35 <= block.count("\n") <= 50                  # a ~40-line block
        assert prompt["prediction"] != block                  # the renamed code
    for prompt in SETS["edit"]:
        assert prompt["ask"].endswith(prompt["prediction"])   # the file as sent
