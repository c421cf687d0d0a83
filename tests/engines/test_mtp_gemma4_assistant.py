"""MTP drafts from a separate head file: Gemma 4's assistant (``gemma4-assistant``, as
``mtp-gemma-4-*.gguf``) on the tiny random-weight Gemma 4 (``tests/tiny_gemma4.py``).

Plumbing only (noise weights). What holds whatever the weights: the assistant's header says
every block is an MTP block; llama.cpp links its context to the target's KV (query-only
attention: ``shares_memory``), so drafting writes nothing anywhere (the target's KV length is
unchanged and the same state drafts the same twice); it drafts ``n_max`` in-vocabulary ids
after a decode and again after a rejected tail is cut from the target's KV; a head built for
a target of another width is refused before llama.cpp sees it.
"""
import pytest

from mtp_checks import N_MAX, Target, ll_fixture, load  # noqa: F401 (the ll fixture)
from tiny_gemma4 import TinyGemma4, write_tiny_gemma4, write_tiny_gemma4_assistant
from hypnos.engines.errors import MtpUnavailable
from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.engines.llama.speculative.mtp import MtpDrafter, require_mtp_heads

pytestmark = pytest.mark.real

PROMPT = [300, 301, 302, 303, 304, 305]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma4-mtp")
    return (write_tiny_gemma4(d / "tiny-gemma4.gguf"),
            write_tiny_gemma4_assistant(d / "mtp-tiny-gemma4.gguf"),
            write_tiny_gemma4_assistant(d / "mtp-wide.gguf", TinyGemma4(n_embd=128)))


@pytest.fixture(scope="module")
def pair(ll, paths):
    target_model, head = load(ll, paths[0]), load(ll, paths[1])
    target = Target(ll, target_model, n_rs_seq=0)
    drafter = MtpDrafter(ll, target_model, target.ctx, n_seq_max=2, n_ctx=512, n_threads=1,
                         mtp_model=head, model_id="tiny-gemma4")
    yield target, drafter
    drafter.close()
    ll.llama_free(target.ctx)
    ll.llama_model_free(head)
    ll.llama_model_free(target_model)


def test_the_assistant_header_is_all_mtp_blocks(paths):
    head, target = read_gguf_meta(paths[1]), read_gguf_meta(paths[0])
    assert head.architecture == "gemma4-assistant"
    assert head.nextn_layers == head.num_layers == 2
    require_mtp_heads(head, "tiny-gemma4")
    assert not target.has_mtp_heads          # the heads come apart from the target


def test_the_assistant_drafts_over_the_targets_kv(pair):
    target, drafter = pair
    assert drafter.shares_memory
    target.ll.llama_memory_seq_rm(target.mem, 0, 0, -1)
    drafter.rollback(0, 0)
    tokens = PROMPT + [target.decode(0, PROMPT, 0)[-1]]
    drafter.observe_batch(target.batch, len(PROMPT))
    drafts = drafter.propose(0, tokens, N_MAX)
    assert len(drafts) == N_MAX and all(0 <= t < target.n_vocab for t in drafts)
    assert target.kv_len(0) == len(PROMPT)
    assert drafter.propose(0, tokens, N_MAX) == drafts

    first = len(tokens) - 1
    target.decode(0, [tokens[-1]] + drafts, first, every_row=True)
    drafter.observe_batch(target.batch, 1 + len(drafts))
    keep = first + 2                                          # one draft accepted
    assert target.ll.llama_memory_seq_rm(target.mem, 0, keep, -1)
    drafter.rollback(0, keep)
    assert target.kv_len(0) == drafter.kv_len(0) == keep
    again = drafter.propose(0, tokens + drafts[:1] + [drafts[1]], N_MAX)
    assert len(again) == N_MAX and target.kv_len(0) == keep


def test_a_head_of_another_width_is_refused(ll, paths):
    target_model, head = load(ll, paths[0]), load(ll, paths[2])
    target = Target(ll, target_model, n_rs_seq=0)
    try:
        with pytest.raises(MtpUnavailable, match="128 wide, the target's 64"):
            MtpDrafter(ll, target_model, target.ctx, n_seq_max=2, n_ctx=512, n_threads=1,
                       mtp_model=head, model_id="tiny-gemma4")
    finally:
        ll.llama_free(target.ctx)
        ll.llama_model_free(head)
        ll.llama_model_free(target_model)
