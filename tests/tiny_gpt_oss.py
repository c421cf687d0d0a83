"""A tiny random-weight gpt-oss GGUF that the pinned llama.cpp loads, carrying OpenAI's
published gpt-oss chat template (harmony).

The real files are 12 and 63 GB. This writes the family's file format instead:
``general.architecture = "gpt-oss"`` with the keys and tensors llama.cpp's loader reads (two
layers, alternating sliding-window and full attention, attention sinks, a 4-expert mixture
with biases) and a byte-level BPE vocabulary (``gpt2`` with the ``gpt-4o`` pre-tokenizer, as
o200k_harmony) holding the 256 byte symbols and the harmony markers (``<|start|>``,
``<|channel|>``, ``<|message|>``, ``<|constrain|>``, ``<|end|>``, ``<|return|>``,
``<|call|>``). The template is ``tests/data/templates/gpt-oss.jinja`` (llama.cpp's
``models/templates/openai-gpt-oss-120b.jinja``).

The weights are noise: it proves the plumbing (the loader, the template through the engine,
the harmony reader, forced calls under the grammar ending at ``<|call|>``), never what
gpt-oss would answer.

    python tests/tiny_gpt_oss.py OUT.gguf
"""
from __future__ import annotations

import sys
from pathlib import Path

from tiny_gguf import Weights, add_byte_level_vocab, finish

TEMPLATE = Path(__file__).resolve().parent / "data" / "templates" / "gpt-oss.jinja"
ARCH = "gpt-oss"
SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
            "<|start|>", "<|end|>", "<|message|>", "<|call|>"]


def write_tiny_gpt_oss(path: Path, seed: int = 0) -> Path:
    """Write the model to ``path`` and return it. Deterministic for a given seed."""
    import gguf
    d, heads, heads_kv, hd, experts, ffn, layers = 64, 2, 1, 32, 4, 64, 2
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name("tiny-random-gpt-oss")
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(heads_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(150_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_sliding_window(128)
    w.add_expert_count(experts)
    w.add_expert_used_count(2)
    w.add_uint32(f"{ARCH}.expert_feed_forward_length", ffn)

    tokens = add_byte_level_vocab(w, "gpt-4o", SPECIALS, [], TEMPLATE.read_text(),
                                  bos="<|startoftext|>", eos="<|return|>", pad="<|endoftext|>")
    noise, ones = Weights(seed).noise, Weights.ones

    w.add_tensor("token_embd.weight", noise(len(tokens), d))
    w.add_tensor("output_norm.weight", ones(d))
    w.add_tensor("output.weight", noise(len(tokens), d))
    for i in range(layers):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(d))
        w.add_tensor(f"{b}.post_attention_norm.weight", ones(d))
        w.add_tensor(f"{b}.attn_q.weight", noise(heads * hd, d))
        w.add_tensor(f"{b}.attn_k.weight", noise(heads_kv * hd, d))
        w.add_tensor(f"{b}.attn_v.weight", noise(heads_kv * hd, d))
        w.add_tensor(f"{b}.attn_q.bias", noise(heads * hd))
        w.add_tensor(f"{b}.attn_k.bias", noise(heads_kv * hd))
        w.add_tensor(f"{b}.attn_v.bias", noise(heads_kv * hd))
        w.add_tensor(f"{b}.attn_output.weight", noise(d, heads * hd))
        w.add_tensor(f"{b}.attn_output.bias", noise(d))
        w.add_tensor(f"{b}.attn_sinks.weight", noise(heads))
        w.add_tensor(f"{b}.ffn_gate_inp.weight", noise(experts, d))
        w.add_tensor(f"{b}.ffn_gate_inp.bias", noise(experts))
        w.add_tensor(f"{b}.ffn_gate_exps.weight", noise(experts, ffn, d))
        w.add_tensor(f"{b}.ffn_gate_exps.bias", noise(experts, ffn))
        w.add_tensor(f"{b}.ffn_up_exps.weight", noise(experts, ffn, d))
        w.add_tensor(f"{b}.ffn_up_exps.bias", noise(experts, ffn))
        w.add_tensor(f"{b}.ffn_down_exps.weight", noise(experts, d, ffn))
        w.add_tensor(f"{b}.ffn_down_exps.bias", noise(experts, d))
    finish(w)
    return path


if __name__ == "__main__":
    out = write_tiny_gpt_oss(Path(sys.argv[1]))
    print(f"{out} ({out.stat().st_size} bytes)")
