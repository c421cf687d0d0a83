"""``speculative = "mtp"`` as a setting, and which drafts are asked together (issue 30), pure: the
value parses (string and table) and bad tables are refused in the config's words; an ``mtp``
engine hands its jobs the MTP heads' per-sequence drafters (``auto`` over them says
``auto:mtp``); the target context keeps recurrent snapshots only with MTP heads; and a model
drafter's ``plan`` asks the shared source (also inside ``auto``, capped by its policy, and
behind prompt lookup where it does not copy), an n-gram one drafts alone."""
from __future__ import annotations

from pathlib import Path

import pytest

from hypnos.engines.llama.speculative.choose import (N_MAX, SpecConfig, Speculation,
                                                     parse_spec, rs_snapshots, uses_mtp)
from hypnos.engines.llama.speculative import Batched
from hypnos.engines.llama.speculative.draft_model import DraftSeq
from hypnos.engines.llama.speculative.drafts import LookupFirst, NgramDrafter
from hypnos.engines.llama.speculative.tuning import WARMUP, AutoDrafter, KindStats
from hypnos.engines.records import LoadSpec
from hypnos.service.config.load import ConfigError, load_config


@pytest.mark.parametrize("value, want", [
    ("mtp", SpecConfig(mode="mtp")),
    ({"mode": "mtp", "n_max": 2}, SpecConfig(mode="mtp", n_max=2)),
])
def test_mtp_settings_parse(value, want):
    assert parse_spec(value) == want


@pytest.mark.parametrize("value, says", [
    ("MTP", "must be"), ({"mode": "mtp", "draft": "small"}, "no draft id"),
    ({"mode": "mtp", "n_max": 0}, "n_max"), ({"mode": "mtp", "heads": 1}, "unknown key"),
])
def test_bad_mtp_settings_say_what_is_wrong(value, says):
    with pytest.raises(ValueError, match=says):
        parse_spec(value)


MODEL = ('[[models]]\nid = "{id}"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
         'weights_path = "{id}.gguf"\n')


def test_config_takes_mtp_and_refuses_a_bad_table(tmp_path: Path):
    p = tmp_path / "hypnos.toml"
    p.write_text(MODEL.format(id="a") + 'speculative = "mtp"\n'
                 + MODEL.format(id="b") + 'speculative = {mode = "mtp", n_max = 3}\n')
    cfg = load_config(p, env={})
    assert parse_spec(cfg.model("b").speculative) == SpecConfig("mtp", n_max=3)
    p.write_text(MODEL.format(id="a") + 'speculative = {mode = "mtp", draft = "x"}\n')
    with pytest.raises(ConfigError, match=r"models\[0\]\.speculative: .*no draft id"):
        load_config(p, env={})


def test_an_mtp_engine_hands_out_its_heads_drafters():
    made = []

    def source(seq):
        made.append(seq)
        return DraftSeq(None, seq)
    spec = Speculation(SpecConfig("mtp", n_max=3), True, source)
    drafter, maker, stats = spec.for_job(None, 10, "text")
    assert drafter is None and maker is source and stats.to_wire() == {
        "method": "mtp", "drafted": 0, "accepted": 0, "n_max": 3}
    assert Speculation(SpecConfig("mtp"), False, source).for_job(None, 10, "text") == (
        None, None, None)
    auto = Speculation(SpecConfig("auto"), True, source, observer=object())
    drafter, maker, stats = auto.for_job(None, 10, "text")
    assert drafter is None and stats.method == "auto:mtp"
    assert isinstance(maker(1), AutoDrafter) and made == [1]


def load_spec(speculative, **files) -> LoadSpec:
    return LoadSpec("m", Path("m.gguf"), files=files, options={"speculative": speculative})


def test_only_mtp_heads_keep_recurrent_snapshots():
    assert rs_snapshots(load_spec({"mode": "mtp", "n_max": 5})) == 5
    assert rs_snapshots(load_spec("mtp")) == SpecConfig().n_max
    assert rs_snapshots(load_spec("ngram")) == rs_snapshots(load_spec(None)) == 0
    # ``auto`` measures the heads when their separate file was pulled, a named draft else.
    head = Path("mtp-m.gguf")
    assert uses_mtp(load_spec("auto", mtp_path=head)) and not uses_mtp(load_spec("auto"))
    assert not uses_mtp(load_spec({"mode": "auto", "draft": "small"}, mtp_path=head))
    assert not uses_mtp(load_spec("ngram", mtp_path=head))
    # Over heads, ``auto`` drafts a draft model's few, not prompt lookup's many.
    assert rs_snapshots(load_spec("auto", mtp_path=head)) == N_MAX
    assert rs_snapshots(load_spec({"mode": "auto", "n_max": 6}, mtp_path=head)) == 6


def test_model_drafts_go_to_the_shared_source_and_ngrams_alone():
    seq = DraftSeq(None, 2)                        # its model: whatever the ask names
    context = list(range(20))
    assert seq.plan(context, 3) == ([], Batched(None, 2, 3))
    assert NgramDrafter().plan(context, 3) == ([], None)
    assert AutoDrafter(NgramDrafter(), KindStats(4)).plan(context, 3) == ([], None)
    stats = KindStats(4)
    assert AutoDrafter(seq, stats).plan(context, 3) == ([], Batched(None, 2, 3))  # warming up
    # Figures that say drafting does not pay: the policy's 0 (a plain step) is kept.
    stats.plain_steps = stats.main.draft_steps = WARMUP
    stats.plain_s, stats.per_draft_s, stats.main.rejections = 0.01, 0.05, 10.0
    assert AutoDrafter(seq, stats).plan(context, 3) == ([], Batched(None, 2, 0))


def test_lookup_in_front_copies_now_and_asks_the_shared_source_elsewhere():
    copy = [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5]
    front = LookupFirst(DraftSeq(None, 1), n_model=2)
    assert front.plan(copy, 64) == ([6, 7, 8, 9], None)          # the lookup's window
    assert front.plan(list(range(20)), 64) == ([], Batched(None, 1, 2))   # at most n_model
