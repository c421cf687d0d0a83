"""The GGUF reader on the default lineup's real SmolLM2 file (moved from
tests/unit/test_gguf_meta.py)."""
from __future__ import annotations

import gguf

from conftest import require_smollm2
from hypnos.engines.gguf_meta import read_gguf_meta


def test_real_smollm2():
    path = require_smollm2()
    meta = read_gguf_meta(path)
    assert meta.architecture == "llama"
    assert meta.num_layers == 30
    assert meta.embedding_length == 576
    assert meta.head_count_kv == 3
    assert meta.head_dim == 64
    assert meta.vocab_size == 49152
    assert meta.chat_template and "<|im_start|>" in meta.chat_template
    assert meta.expert_bytes == 0
    assert len(set(meta.layer_bytes)) == 1
    shape = meta.to_shape()
    assert shape.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2
    # Agrees with gguf's own (slow) reader on every tensor byte.
    reader = gguf.GGUFReader(path)
    assert meta.tensor_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    blk = sum(int(t.n_bytes) for t in reader.tensors if t.name.startswith("blk."))
    assert meta.non_layer_bytes == meta.tensor_bytes - blk
