"""Speculative decoding's settings and choices, pure (issue 30): the ``speculative`` config
value, which drafter a request gets, the ``auto`` policy's arithmetic, and the wire's
``prediction`` and usage details."""
from __future__ import annotations

from pathlib import Path

import pytest

from hypnos.engines.llama.speculative.choose import (SpecConfig, Speculation, parse_spec,
                                                     request_kind)
from hypnos.engines.llama.speculative.drafts import AnswerPool, NgramDrafter, PredictionDrafter
from hypnos.engines.llama.speculative.tuning import (GUESS_PRIOR, PROBE_EVERY, WARMUP,
                                                     AutoDrafter, KindStats, best_k,
                                                     expected_tokens)
from hypnos.engines.records import ChatRequest, ChatResult
from hypnos.service.config.load import ConfigError, load_config
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.errors import InvalidRequest
from hypnos.service.inference.text import usage
from hypnos.service.wire.chat import parse_chat


# ------------------------------------------------------------------ the setting

@pytest.mark.parametrize("value, want", [
    (None, SpecConfig()), ("off", SpecConfig()), ("ngram", SpecConfig(mode="ngram", n_max=64)),
    ("auto", SpecConfig(mode="auto", n_max=64)),
    ({"draft": "small", "n_max": 6}, SpecConfig(mode="draft", draft="small", n_max=6)),
    ({"draft": "small", "mode": "auto"}, SpecConfig(mode="auto", draft="small")),
    ({"n_max": 8}, SpecConfig(mode="ngram", n_max=8)),
    ({"mode": "auto"}, SpecConfig(mode="auto", n_max=64)),
    ({"draft": "small", "lookup": False}, SpecConfig(mode="draft", draft="small", lookup=False)),
])
def test_spec_settings_parse(value, want):
    assert parse_spec(value) == want


@pytest.mark.parametrize("value, says", [
    ("fast", "must be"), (3, "string or a table"), ({"draft": ""}, "model id"),
    ({"n_max": 0}, "n_max"), ({"n_max": True}, "n_max"), ({"mode": "draft"}, "draft needs"),
    ({"draft": "x", "p_min": 1}, "unknown key 'p_min'"),
    ({"draft": "x", "lookup": "no"}, "lookup must be"),
])
def test_bad_spec_settings_say_what_is_wrong(value, says):
    with pytest.raises(ValueError, match=says):
        parse_spec(value)


MODEL = """
[[models]]
id = "{id}"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "{id}.gguf"
"""


def test_config_checks_the_speculative_setting(tmp_path: Path):
    p = tmp_path / "hypnos.toml"
    p.write_text(MODEL.format(id="big") + 'speculative = "sometimes"\n'
                 + MODEL.format(id="mid") + 'speculative = {draft = "nobody"}\n')
    with pytest.raises(ConfigError) as exc:
        load_config(p, env={})
    text = str(exc.value)
    assert "models[0].speculative: must be" in text
    assert "models[1].speculative.draft: 'nobody' is not another configured model" in text


def test_config_takes_a_draft_table(tmp_path: Path):
    p = tmp_path / "hypnos.toml"
    p.write_text(MODEL.format(id="big") + 'speculative = {draft = "small", n_max = 3}\n'
                 + MODEL.format(id="small"))
    cfg = load_config(p, env={})
    assert parse_spec(cfg.model("big").speculative) == SpecConfig("draft", "small", 3)
    assert cfg.model("small").speculative == "auto"      # the default


# ------------------------------------------------------------------ which drafter

def test_a_prediction_drafts_whatever_the_setting():
    drafter, maker, stats = Speculation(SpecConfig(), True).for_job([5, 6], 10, "text")
    assert isinstance(drafter, PredictionDrafter) and maker is None
    assert stats.method == "prediction"


def test_off_drafts_nothing_and_ngram_drafts_by_lookup():
    assert Speculation(SpecConfig(), True).for_job(None, 10, "text") == (None, None, None)
    drafter, _, stats = Speculation(SpecConfig("ngram"), True).for_job(None, 10, "text")
    assert isinstance(drafter, NgramDrafter) and stats.method == "ngram"


def test_a_model_that_cannot_roll_back_never_drafts():
    spec = Speculation(SpecConfig("ngram"), can_rollback=False)
    assert spec.for_job([1, 2], 3, "text") == (None, None, None)


def test_auto_keeps_figures_per_kind():
    spec = Speculation(SpecConfig("auto"), True)
    a, _, _ = spec.for_job(None, 1, "tools")
    b, _, _ = spec.for_job(None, 1, "tools")
    c, _, _ = spec.for_job(None, 1, "text")
    assert isinstance(a, AutoDrafter) and a.stats is b.stats and a.stats is not c.stats


def test_request_kinds():
    assert request_kind(ChatRequest(messages=[], tools=[{"x": 1}])) == "tools"
    assert request_kind(ChatRequest(messages=[], tools=[{"x": 1}], tool_choice="none")) == "text"
    assert request_kind(ChatRequest(messages=[], grammar="root ::= \"a\"")) == "structured"
    assert request_kind(ChatRequest(messages=[])) == "text"


# ------------------------------------------------------------------ auto's arithmetic

def test_expected_tokens():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_best_k_drafts_only_where_it_pays():
    # Verifying a draft costs a tenth of a step: good acceptance pays, poor does not.
    assert best_k(0.9, 0.1, 0.01, 8) >= 4
    assert best_k(0.05, 0.1, 0.01, 8) == 0
    # Expensive verification (a CPU): even fair acceptance does not pay.
    assert best_k(0.5, 0.1, 0.1, 8) == 0
    # Middling acceptance: a short draft.
    assert 1 <= best_k(0.6, 0.1, 0.01, 8) < 8


def test_best_k_takes_a_measured_length_over_the_line():
    """Where a step of 3 drafts was measured cheaper than the line (a CPU's kernels take
    positions in groups of 4), the length goes there: without the reading, one draft."""
    assert best_k(0.85, 1.0, 0.7, 8) == 1
    assert best_k(0.85, 1.0, 0.7, 8, {3: 2.6}) == 3
    assert best_k(0.85, 1.0, 0.7, 8, {1: 5.0, 2: 5.0, 3: 5.0}) == 0    # all too dear


def test_kind_stats_read_each_draft_length_and_trust_it_after_a_few_steps():
    stats = KindStats(n_max=8)
    for step_s in (0.5, 0.1):
        stats.record(3, 3, step_s)
    assert stats.measured() == {}                       # two readings: the line still
    stats.record(3, 3, 0.1)
    # A plain mean of the first readings: the slow first step does not outweigh two.
    assert stats.measured() == {3: pytest.approx(0.7 / 3)}
    line = KindStats(n_max=8)
    for s in (stats, line):     # plain steps of 0.1 s, 0.08 s a draft, 90 % taken
        s.plain_steps = s.main.draft_steps = WARMUP
        s.plain_s, s.per_draft_s = 0.1, 0.08
        s.main.accepted, s.main.rejections = 9.0, 1.0
    assert line.n_for_next() == 1
    assert stats.n_for_next() == 3


def test_a_copy_is_cut_to_a_shorter_draft_whose_batch_is_much_cheaper():
    """This AVX-512 CPU's batches (spec_step_costs.py: 4 positions 2.43 plain steps, 5 3.31):
    a 4-token copy drafts 3, which yields more per second even were all 4 taken; lengths
    read too rarely keep the line, which never cuts, and a flat (GPU) batch keeps all."""
    stats = _expensive(KindStats(n_max=64))
    stats.per_draft_s = 0.5 * stats.plain_s
    for _ in range(3):
        stats.record(3, 3, 2.43 * stats.plain_s)
        stats.record(4, 4, 3.31 * stats.plain_s)
    assert stats.n_for_sort("", 4) == 3
    assert stats.n_for_sort("", 3) == 3
    assert stats.trimmed(8) == 8                        # 5..8 not read: the line
    flat = _expensive(KindStats(n_max=64))
    flat.per_draft_s = 0.01 * flat.plain_s
    for k in (3, 4):
        for _ in range(3):
            flat.record(k, k, (1 + 0.01 * k) * flat.plain_s)
    assert flat.n_for_sort("", 4) == 4


def _feed(stats: KindStats, steps: int, accepted: int, drafted: int, plain_s: float,
          draft_s: float) -> None:
    for _ in range(steps):
        stats.record(0, 0, plain_s)
        stats.record(drafted, accepted, draft_s)


def test_kind_stats_stop_drafting_where_rejected_but_probe():
    stats = KindStats(n_max=4)
    _feed(stats, WARMUP, accepted=0, drafted=4, plain_s=0.1, draft_s=0.14)
    assert stats.acceptance < 0.1
    decisions = [stats.n_for_next() for _ in range(PROBE_EVERY * 3)]
    assert decisions.count(4) == 3 and decisions.count(0) == len(decisions) - 3


def test_kind_stats_keep_drafting_where_accepted():
    stats = KindStats(n_max=4)
    _feed(stats, WARMUP, accepted=4, drafted=4, plain_s=0.1, draft_s=0.11)
    assert stats.acceptance > 0.9
    assert stats.n_for_next() == 4


def test_auto_drafter_asks_for_no_more_than_advised():
    stats = KindStats(n_max=4)
    _feed(stats, WARMUP, accepted=0, drafted=4, plain_s=0.1, draft_s=0.2)
    d = AutoDrafter(NgramDrafter(), stats)
    assert d.propose([1, 2, 1], 4) == []              # not a probe step: nothing drafted
    d.on_accept(0, 0, 0.1)
    assert stats.plain_steps == WARMUP + 1


def _expensive(stats: KindStats) -> KindStats:
    """Figures of a few CPU cores: a drafted position costs 0.6 of a 30 ms step, main
    drafts 90 % taken."""
    stats.plain_steps = stats.main.draft_steps = WARMUP
    stats.plain_s, stats.per_draft_s = 0.03, 0.018
    stats.main.accepted, stats.main.rejections = 9.0, 1.0
    return stats


def test_a_sort_refused_half_the_time_stops_where_a_position_is_dear_but_probes():
    stats = _expensive(KindStats(n_max=64))
    for _ in range(WARMUP):
        stats.record(4, 1, 0.1, "gapped")
    assert stats.sorts["gapped"].acceptance < 0.6
    assert stats.draft_steps == WARMUP                  # the main figures are untouched
    decisions = [stats.n_for_sort("gapped", 4) for _ in range(PROBE_EVERY * 2)]
    assert decisions.count(4) == 2 and decisions.count(0) == len(decisions) - 2
    assert stats.n_for_sort("", 4) > 0                  # copies go on
    assert stats.n_for_sort("spelled", 4) == 1          # a sort not seen yet: one token


def test_a_new_guess_drafts_one_token_where_a_position_is_dear_and_all_where_it_is_free():
    """While a sort is new (WARMUP of its steps) its own acceptance is read: a guess is
    drafted as far as GUESS_PRIOR pays on the costs read so far, at least one token; an
    earlier answer (a copy) whole."""
    dear = _expensive(KindStats(n_max=64))
    for _ in range(3):                  # this CPU's batches: 2 positions 1.9 steps, 5 3.6
        dear.record(1, 1, 1.9 * dear.plain_s, "gapped")
        dear.record(4, 2, 3.6 * dear.plain_s, "gapped")
    assert dear.sorts["gapped"].draft_steps < WARMUP
    assert best_k(GUESS_PRIOR, dear.plain_s, dear.per_draft_s, 4, dear.trusted) == 0
    assert [dear.n_for_sort(sort, 4) for sort in ("gapped", "spelled", "edited")] == [1, 1, 1]
    assert dear.n_for_sort("pool", 8) == 8
    free = _expensive(KindStats(n_max=64))
    free.per_draft_s = 0.0005                           # a GPU's batch: flat
    assert free.n_for_sort("spelled", 4) == 4
    unread = KindStats(n_max=64)                        # no plain step timed yet
    assert unread.n_for_sort("gapped", 4) == 4


def test_the_same_sort_drafts_where_a_position_is_nearly_free():
    stats = _expensive(KindStats(n_max=64))
    stats.per_draft_s = 0.0005                          # a GPU's batch: flat
    for _ in range(WARMUP):
        stats.record(4, 1, 0.032, "gapped")
    assert 0 < stats.n_for_sort("gapped", 4) <= 4


def test_an_earlier_answer_is_drafted_though_the_kinds_other_drafts_fail():
    """A question asked again copies the pool's answer whole, while the same key's other
    answers guessed badly: the pool keeps its own figures, so they do not stop it."""
    stats = _expensive(KindStats(n_max=64))
    stats.main.accepted, stats.main.rejections = 1.0, 9.0    # main drafts: mostly refused
    for _ in range(WARMUP):
        stats.record(8, 8, 0.09, "pool")
    assert [stats.n_for_sort("", 8) for _ in range(3)] == [0, 0, 0]
    assert stats.n_for_sort("pool", 8) == 8


def test_auto_asks_a_sorting_drafter_for_everything_and_feeds_the_sort_it_drafted():
    pool = AnswerPool()
    prompt, answer = list(range(90, 110)), list(range(10, 80))
    first = NgramDrafter(pool=pool, prompt_len=len(prompt))
    first.propose(prompt + answer, 4)
    first.close()
    stats = _expensive(KindStats(n_max=64))
    stats.main.accepted, stats.main.rejections = 0.0, 9.0    # main drafts: cut to none
    auto = AutoDrafter(NgramDrafter(pool=pool, prompt_len=len(prompt)), stats)
    tokens, batched = auto.plan(prompt, 64)
    assert batched is None and tokens == answer[:4]    # the pool's, new: kept whole
    assert auto.sort == "pool"
    auto.on_accept(len(tokens), len(tokens), 0.06)
    assert stats.sorts["pool"].draft_steps == 1 and stats.draft_steps == WARMUP
    assert auto.sort == ""
    auto.on_accept(0, 0, 0.03)                          # a plain step: the main figures
    assert stats.plain_steps == WARMUP + 1


# ------------------------------------------------------------------ the wire

def test_prediction_on_the_chat_wire():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "prediction": {"type": "content", "content": [{"type": "text", "text": "a"},
                                                          {"type": "text", "text": "b"}]}}
    assert parse_chat(body, LimitsConfig()).request.prediction == "ab"
    body["prediction"] = {"type": "content", "content": "whole"}
    assert parse_chat(body, LimitsConfig()).request.prediction == "whole"


@pytest.mark.parametrize("prediction", [{"type": "file", "content": "x"}, {"type": "content"},
                                        "text", {"type": "content", "content": [{"x": 1}]}])
def test_a_bad_prediction_is_a_400_naming_it(prediction):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "prediction": prediction}
    with pytest.raises(InvalidRequest) as exc:
        parse_chat(body, LimitsConfig())
    assert "prediction" in str(exc.value.param or "") + str(exc.value)


def test_usage_reports_prediction_tokens_over_the_choices():
    def result(spec):
        return ChatResult(text="", finish_reason="stop", prompt_tokens=5,
                          completion_tokens=9, speculative=spec)
    both = usage([result({"method": "prediction", "drafted": 10, "accepted": 7, "n_max": 8}),
                  result({"method": "prediction", "drafted": 4, "accepted": 1, "n_max": 8})])
    assert both["completion_tokens_details"] == {"accepted_prediction_tokens": 8,
                                                 "rejected_prediction_tokens": 6}
    ngram = usage([result({"method": "ngram", "drafted": 4, "accepted": 1, "n_max": 4})])
    assert "completion_tokens_details" not in ngram


def test_a_draft_is_booked_with_its_target():
    from conftest import MODELS_DIR, require_smollm2
    from hypnos.service.config.load import parse_config
    from hypnos.service.scheduling.build import build_state
    require_smollm2()
    smol = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
    block = ('[[models]]\nid = "{id}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
             f'weights_path = "{smol}"\n')
    import tomllib
    cfg = parse_config(tomllib.loads(
        f'models_dir = "{MODELS_DIR}"\n' + block.format(id="alone")
        + block.format(id="drafted") + 'speculative = {draft = "alone"}\n'))
    alone, drafted = build_state(cfg, cfg.models[0]), build_state(cfg, cfg.models[1])
    assert drafted.paths["draft_path"] == alone.paths["weights_path"]
    # Its own part of the shape (issue 30), not folded into the projector: the draft's
    # tensors and its own KV per token, read from its GGUF.
    assert drafted.shape.projector_bytes == alone.shape.projector_bytes
    draft = drafted.shape.draft
    assert draft is not None and draft.model_id == "alone" and draft.kind == "draft"
    assert draft.weights_bytes == alone.shape.weights_bytes
    assert draft.kv_bytes_per_token == alone.shape.kv_bytes_per_token
    assert alone.shape.draft is None
