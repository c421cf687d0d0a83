"""What the MTP drafter tests share (tests/engines/test_mtp_*.py): loading a model with its
MTP layers, and the target side of the decode loop driven by hand."""
from __future__ import annotations

import numpy as np
import pytest

from hypnos.engines.llama.speculative.mtp import enable_mtp_loading

N_MAX = 4


@pytest.fixture(scope="module", name="ll")
def ll_fixture():
    """The llama.cpp bindings, backend initialised (a fixture the MTP tests import)."""
    import llama_cpp.llama_cpp as ll
    ll.llama_backend_init()
    return ll


def load(ll, path):
    params = ll.llama_model_default_params()
    enable_mtp_loading(params)
    model = ll.llama_model_load_from_file(str(path).encode(), params)
    assert model, path
    return model


class Target:
    """The target side of the loop, as the decode loop drives it: one context, two
    sequences, recurrent-state snapshots for rollback, a batch per decode."""

    def __init__(self, ll, model, n_rs_seq=N_MAX):
        self.ll = ll
        params = ll.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.n_batch, params.n_ubatch = 512, 2, 64, 64
        params.n_rs_seq = n_rs_seq
        params.kv_unified = False
        params.n_threads = params.n_threads_batch = 1     # tiny: spinning threads only cost
        self.ctx = ll.llama_init_from_model(model, params)
        assert self.ctx
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))
        self.batch = ll.llama_batch_init(64, 0, 1)

    def decode(self, seq, tokens, first_pos, every_row=False):
        """Decode ``tokens`` at ``first_pos``.. of ``seq``; the argmax after each row that
        asks for logits (the last only, as the decode loop's prompt chunks do, or all, as a
        verification batch does)."""
        b = self.batch
        for i, t in enumerate(tokens):
            out = every_row or i == len(tokens) - 1
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, first_pos + i, 1, out
            b.seq_id[i][0] = seq
        b.n_tokens = len(tokens)
        assert self.ll.llama_decode(self.ctx, b) == 0
        rows = range(len(tokens)) if every_row else [len(tokens) - 1]
        return [int(np.argmax(np.ctypeslib.as_array(self.ll.llama_get_logits_ith(self.ctx, i),
                                                    shape=(self.n_vocab,))))
                for i in rows]

    def kv_len(self, seq):
        return self.ll.llama_memory_seq_pos_max(self.mem, seq) + 1
