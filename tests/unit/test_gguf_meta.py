"""GGUF header reading: the real SmolLM2 file and tiny files written with gguf.GGUFWriter."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from hypnos.engines.gguf_meta import read_gguf_meta



def write_tiny_moe(path: Path, layers: int = 2, vocab: int = 10_000) -> dict[str, int]:
    """A small random 'llama' MoE file; returns the bytes written per tensor name."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_context_length(2048)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(8)
    writer.add_head_count_kv(2)
    writer.add_key_length(16)
    writer.add_value_length(16)
    writer.add_expert_count(4)
    writer.add_expert_used_count(2)
    writer.add_chat_template("{{ messages[0]['content'] }}")
    writer.add_token_list([f"t{i}" for i in range(vocab)])   # a long array the reader skips
    rng = np.random.default_rng(0)
    tensors = {"token_embd.weight": rng.random((vocab, 64), dtype=np.float32).astype(np.float16),
               "output_norm.weight": rng.random(64, dtype=np.float32)}
    for i in range(layers):
        tensors[f"blk.{i}.attn_q.weight"] = rng.random((64, 64), dtype=np.float32)
        tensors[f"blk.{i}.ffn_gate_exps.weight"] = rng.random((4, 32, 64), dtype=np.float32)
        tensors[f"blk.{i}.ffn_gate_inp.weight"] = rng.random((4, 64), dtype=np.float32)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {name: array.nbytes for name, array in tensors.items()}


def test_tiny_moe_file(tmp_path: Path):
    path = tmp_path / "tiny.gguf"
    sizes = write_tiny_moe(path)
    meta = read_gguf_meta(path)
    assert (meta.architecture, meta.num_layers, meta.embedding_length) == ("llama", 2, 64)
    assert (meta.head_count, meta.head_count_kv, meta.head_dim) == (8, 2, 16)
    assert (meta.expert_count, meta.expert_used_count) == (4, 2)
    assert meta.context_length == 2048
    assert meta.vocab_size == 10_000                 # counted from the skipped token list
    assert meta.chat_template == "{{ messages[0]['content'] }}"
    assert meta.tensor_bytes == sum(sizes.values())
    assert meta.non_layer_bytes == sizes["token_embd.weight"] + sizes["output_norm.weight"]
    exps = sizes["blk.0.ffn_gate_exps.weight"]
    assert meta.expert_bytes == 2 * exps
    layer = exps + sizes["blk.0.attn_q.weight"] + sizes["blk.0.ffn_gate_inp.weight"]
    assert meta.layer_bytes == (layer, layer)
    assert meta.file_bytes == path.stat().st_size

    shape = meta.to_shape(projector_bytes=1234)
    assert shape.expert_bytes_per_layer == exps
    assert shape.layer_bytes == layer
    assert shape.num_layers * shape.layer_bytes + shape.non_layer_bytes == shape.weights_bytes
    assert shape.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2     # 2 B * layers * kv * dim * (K,V)
    assert shape.projector_bytes == 1234
    assert shape.max_context_len == 2048
    assert shape.workspace_bytes > 0


def test_head_dim_defaults_to_embedding_over_heads(tmp_path: Path):
    path = tmp_path / "dense.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_block_count(1)
    writer.add_embedding_length(96)
    writer.add_head_count(6)
    writer.add_tensor("blk.0.attn_k.weight", np.zeros((96, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    meta = read_gguf_meta(path)
    assert (meta.head_dim, meta.head_count_kv) == (16, 6)    # kv heads default to heads
    assert meta.expert_bytes == 0
    assert meta.chat_template is None
    assert meta.to_shape().kv_bytes_per_token == 2 * 1 * 6 * 16 * 2


@pytest.mark.parametrize("content", [b"", b"not a gguf file at all, just text\n" * 4,
                                     b"GGUF\x03\x00\x00\x00" + b"\xff" * 40])
def test_non_gguf_is_a_value_error(tmp_path: Path, content: bytes):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="bad.gguf"):
        read_gguf_meta(path)
