"""MTP drafts through llama.cpp's staging bindings, on the tiny random-weight Qwen3.5 GGUF
with one nextn (MTP) block (``tests/tiny_qwen35.py``, ``nextn=1``).

Plumbing only: the weights are noise, so nothing here says a draft would be accepted. What
holds whatever the weights: the bindings load and the MTP context links to the target's;
after a target decode the drafter proposes ``n_max`` in-vocabulary ids and leaves its KV as
it found it (the same state drafts the same twice); feeding a verification batch and rolling
the rejected tail back leaves the MTP KV exactly as long as the target's, and the drafter
drafts again from there, also when only the target's KV was cut (the per-sequence view the
decode loop's Drafter protocol calls); sequences are independent; a GGUF without nextn layers
is refused with an error that names them, at config time (its header) and at load; and a
hybrid target (as most MTP models are) drops a draft's tail only with recurrent snapshots.
"""
import pytest

from mtp_checks import N_MAX, Target, ll_fixture, load  # noqa: F401 (the ll fixture)
from tiny_qwen35 import write_tiny_qwen35
from hypnos.engines.errors import MtpUnavailable
from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.engines.llama.speculative.mtp import MtpDrafter, require_mtp_heads

pytestmark = pytest.mark.real

PROMPT = [40, 41, 42, 43, 44, 45, 46, 47]
OTHER = [60, 61, 62, 63, 64]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp")
    return (write_tiny_qwen35(d / "tiny-qwen35-mtp.gguf", nextn=1),
            write_tiny_qwen35(d / "tiny-qwen35.gguf"))


@pytest.fixture(scope="module")
def loop(ll, paths):
    model = load(ll, paths[0])
    target = Target(ll, model)
    drafter = MtpDrafter(ll, model, target.ctx, n_seq_max=2, n_ctx=512, n_threads=1,
                         model_id="tiny-qwen35-mtp")
    yield target, drafter
    drafter.close()
    ll.llama_free(target.ctx)
    ll.llama_model_free(model)


def prefill(target, drafter, seq, prompt):
    """A new job on ``seq``: both KVs cleared, the prompt decoded and shown to the drafter;
    returns the slot's tokens (the prompt plus the target's next token)."""
    target.ll.llama_memory_seq_rm(target.mem, seq, 0, -1)
    drafter.rollback(seq, 0)
    nxt = target.decode(seq, prompt, 0)[-1]
    drafter.observe_batch(target.batch, len(prompt))
    return prompt + [nxt]


def test_the_header_reports_the_nextn_layers(paths):
    with_heads, without = read_gguf_meta(paths[0]), read_gguf_meta(paths[1])
    assert (with_heads.nextn_layers, with_heads.num_layers) == (1, 3)
    assert (without.nextn_layers, without.num_layers) == (0, 2)
    assert with_heads.has_mtp_heads and not without.has_mtp_heads
    require_mtp_heads(with_heads, "tiny")


def test_a_gguf_without_nextn_layers_is_refused_by_name(ll, paths):
    with pytest.raises(MtpUnavailable, match="no nextn layers"):
        require_mtp_heads(read_gguf_meta(paths[1]), "tiny-qwen35")
    model = load(ll, paths[1])
    target = Target(ll, model)
    try:
        with pytest.raises(MtpUnavailable, match=r"tiny-qwen35: .*nextn_predict_layers"):
            MtpDrafter(ll, model, target.ctx, n_seq_max=2, n_ctx=512, n_threads=1,
                       model_id="tiny-qwen35")
    finally:
        ll.llama_free(target.ctx)
        ll.llama_model_free(model)


def test_the_mtp_context_is_its_own_and_drafts_in_vocabulary(loop):
    target, drafter = loop
    assert drafter.n_heads == 1 and not drafter.shares_memory
    tokens = prefill(target, drafter, 0, PROMPT)
    assert drafter.kv_len(0) == target.kv_len(0) == len(PROMPT)
    assert drafter.can_draft(0, len(tokens))
    drafts = drafter.propose(0, tokens, N_MAX)
    assert len(drafts) == N_MAX
    assert all(0 <= t < target.n_vocab for t in drafts)
    assert drafter.kv_len(0) == len(PROMPT)          # the drafted rows were cut
    assert drafter.propose(0, tokens, N_MAX) == drafts
    assert drafter.propose(0, tokens, 2) == drafts[:2]
    assert drafter.propose(0, tokens + [5], N_MAX) == []    # past what the target decoded
    assert drafter.kv_len(0) == len(PROMPT)


def test_a_rejected_tail_rolls_back_both_kvs_to_the_same_length(loop):
    target, drafter = loop
    tokens = prefill(target, drafter, 0, PROMPT)
    drafts = drafter.propose(0, tokens, N_MAX)
    first = len(tokens) - 1
    target.decode(0, [tokens[-1]] + drafts, first, every_row=True)   # verify in one batch
    drafter.observe_batch(target.batch, 1 + len(drafts))
    assert drafter.kv_len(0) == target.kv_len(0) == first + 1 + len(drafts)
    keep = first + 1 + 2                                      # two drafts accepted
    assert target.ll.llama_memory_seq_rm(target.mem, 0, keep, -1)   # n_rs_seq snapshots
    drafter.rollback(0, keep)
    assert drafter.kv_len(0) == target.kv_len(0) == keep
    accepted = tokens + drafts[:2]
    assert drafter.can_draft(0, len(accepted) + 1)
    again = drafter.propose(0, accepted + [drafts[2]], N_MAX)
    assert len(again) == N_MAX and drafter.kv_len(0) == keep


def test_sequences_are_independent(loop):
    target, drafter = loop
    tokens = prefill(target, drafter, 0, PROMPT)
    before = drafter.propose(0, tokens, N_MAX)
    other = prefill(target, drafter, 1, OTHER)
    assert len(drafter.propose(1, other, N_MAX)) == N_MAX
    drafter.rollback(1, 0)
    assert drafter.kv_len(1) == 0 and not drafter.can_draft(1, len(other))
    assert drafter.kv_len(0) == len(PROMPT)
    assert drafter.propose(0, tokens, N_MAX) == before


def test_all_slots_draft_together_and_leave_their_kvs_as_they_were(loop):
    target, drafter = loop
    a = prefill(target, drafter, 0, PROMPT)
    b = prefill(target, drafter, 1, OTHER)
    both = drafter.propose_many([(0, a, N_MAX), (1, b, 2)])
    assert [len(d) for d in both] == [N_MAX, 2]
    assert all(0 <= t < target.n_vocab for d in both for t in d)
    assert (drafter.kv_len(0), drafter.kv_len(1)) == (len(PROMPT), len(OTHER))
    assert drafter.propose_many([(0, a, N_MAX), (1, b, 2)]) == both
    assert drafter.propose_many([(1, b + [5], N_MAX), (0, a, 0)]) == [[], []]


def test_the_sequence_view_follows_a_cut_of_the_targets_kv_alone(loop):
    target, drafter = loop
    tokens = prefill(target, drafter, 0, PROMPT)
    view = drafter.for_seq(0)
    assert view.method == "mtp"
    drafts = view.propose(tokens, N_MAX)
    first = len(tokens) - 1
    target.decode(0, [tokens[-1]] + drafts, first, every_row=True)
    drafter.observe_batch(target.batch, 1 + len(drafts))
    view.on_accept(len(drafts), 1)
    keep = first + 2                                          # one draft accepted
    assert target.ll.llama_memory_seq_rm(target.mem, 0, keep, -1)
    again = view.propose(tokens + drafts[:1] + [drafts[1]], N_MAX)
    assert len(again) == N_MAX
    assert drafter.kv_len(0) == target.kv_len(0) == keep


@pytest.mark.parametrize("n_rs_seq", [0, N_MAX])
def test_a_hybrid_target_drops_a_draft_tail_only_with_recurrent_snapshots(ll, paths, n_rs_seq):
    """qwen35 is hybrid (Gated DeltaNet + attention), like most MTP models: llama.cpp cuts a
    sequence's tail only when the context keeps recurrent-state snapshots (``n_rs_seq``, at
    least the draft length). A fact the decode loop's integration depends on."""
    model = load(ll, paths[0])
    target = Target(ll, model, n_rs_seq=n_rs_seq)
    try:
        assert ll.llama_model_is_hybrid(model)
        target.decode(0, PROMPT, 0)
        target.decode(0, [1, 2, 3], len(PROMPT), every_row=True)
        cut = ll.llama_memory_seq_rm(target.mem, 0, len(PROMPT) + 1, -1)
        assert cut == (n_rs_seq > 0)
    finally:
        ll.llama_free(target.ctx)
        ll.llama_model_free(model)
