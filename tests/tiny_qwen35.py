"""A tiny random-weight Qwen3.5 GGUF (``qwen35``: the architecture of Qwen3.5, Qwen3.6,
Qwen3.8 and MiniCPM-V 4.6's text model) that the pinned llama.cpp loads, carrying Qwen's
published Qwen3.5 chat template.

It writes the family's file format: a hybrid of one Gated DeltaNet (linear attention) block
and one gated full-attention block (``full_attention_interval = 2``; the real models have
three linear blocks per attention block), the ``ssm.*`` keys and tensors llama.cpp's
``qwen35`` loader reads, multi-section rope, and a byte-level BPE vocabulary holding the 256
byte symbols and the template's markers (``<|im_start|>``, ``<think>``, ``<tool_call>``,
...). The template is ``tests/data/templates/qwen3.5.jinja`` (llama.cpp's
``models/templates/Qwen3.5-4B.jinja``).

The weights are noise: it proves the plumbing (the loader and its recurrent state, the
template through the engine, the qwen3_coder dialect and the <think> block, forced calls under
the grammar), never what a Qwen model would answer.

``nextn=1`` adds one MTP (multi-token prediction) block, as Qwen3.5/3.6/3.8 files carry it: the
block count grows by one, ``qwen35.nextn_predict_layers = 1`` says the last block is not part
of the trunk, and that block is a full-attention decoder block plus the ``nextn.*`` tensors
(``eh_proj`` projecting the concatenated normed token embedding and target hidden state,
``enorm``, ``hnorm``, ``shared_head_norm``; the LM head is the model's). Its weights are noise
too: it proves the MTP plumbing (llama.cpp loads the head, an MTP context runs it, drafts are
token ids), never that a draft would be accepted.

    python tests/tiny_qwen35.py OUT.gguf [--nextn]
"""
from __future__ import annotations

import sys
from pathlib import Path

from tiny_gguf import Weights, add_byte_level_vocab, finish

TEMPLATE = Path(__file__).resolve().parent / "data" / "templates" / "qwen3.5.jinja"
ARCH = "qwen35"
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Rendered markers (llama.cpp's Qwen conversion keeps them visible for the chat parser).
VISIBLE = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
           "</tool_response>"]


def write_tiny_qwen35(path: Path, seed: int = 0, nextn: int = 0) -> Path:
    """Write the model to ``path`` and return it. Deterministic for a given seed; ``nextn``
    (0 or 1: llama.cpp's qwen35 MTP graph runs one block) appends that many MTP blocks."""
    import gguf
    d, heads, heads_kv, hd, ffn = 64, 2, 1, 32, 128
    d_state, k_heads, v_heads, d_conv = 16, 2, 4, 4
    key_dim, value_dim = d_state * k_heads, d_state * v_heads

    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name("tiny-random-qwen35")
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_block_count(2 + nextn)
    if nextn:
        w.add_nextn_predict_layers(nextn)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(heads_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(16)
    w.add_array(f"{ARCH}.rope.dimension_sections", [4, 2, 2, 0])
    w.add_rope_freq_base(10_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32(f"{ARCH}.full_attention_interval", 2)
    w.add_uint32(f"{ARCH}.ssm.conv_kernel", d_conv)
    w.add_uint32(f"{ARCH}.ssm.inner_size", value_dim)
    w.add_uint32(f"{ARCH}.ssm.state_size", d_state)
    w.add_uint32(f"{ARCH}.ssm.time_step_rank", v_heads)
    w.add_uint32(f"{ARCH}.ssm.group_count", k_heads)

    tokens = add_byte_level_vocab(w, "qwen35", CONTROL, VISIBLE, TEMPLATE.read_text(),
                                  bos="<|endoftext|>", eos="<|im_end|>", pad="<|endoftext|>")
    noise, ones = Weights(seed).noise, Weights.ones

    w.add_tensor("token_embd.weight", noise(len(tokens), d))
    w.add_tensor("output_norm.weight", ones(d))
    for i, linear in enumerate((True, False)):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(d))
        w.add_tensor(f"{b}.post_attention_norm.weight", ones(d))
        if linear:                      # Gated DeltaNet
            w.add_tensor(f"{b}.attn_qkv.weight", noise(key_dim * 2 + value_dim, d))
            w.add_tensor(f"{b}.attn_gate.weight", noise(value_dim, d))
            w.add_tensor(f"{b}.ssm_conv1d.weight", noise(key_dim * 2 + value_dim, d_conv))
            w.add_tensor(f"{b}.ssm_dt.bias", noise(v_heads))
            w.add_tensor(f"{b}.ssm_a", -ones(v_heads))
            w.add_tensor(f"{b}.ssm_beta.weight", noise(v_heads, d))
            w.add_tensor(f"{b}.ssm_alpha.weight", noise(v_heads, d))
            w.add_tensor(f"{b}.ssm_norm.weight", ones(d_state))
            w.add_tensor(f"{b}.ssm_out.weight", noise(d, value_dim))
        else:
            _add_full_attention(w, b, noise, ones, d, heads, heads_kv, hd)
        _add_ffn(w, b, noise, d, ffn)
    for i in range(2, 2 + nextn):
        _add_mtp_block(w, f"blk.{i}", noise, ones, d, heads, heads_kv, hd, ffn)
    finish(w)
    return path


def _add_mtp_block(w, b: str, noise, ones, d: int, heads: int, heads_kv: int, hd: int,
                   ffn: int) -> None:
    """One MTP block: a gated full-attention decoder block and the ``nextn.*`` tensors."""
    w.add_tensor(f"{b}.attn_norm.weight", ones(d))
    w.add_tensor(f"{b}.post_attention_norm.weight", ones(d))
    _add_full_attention(w, b, noise, ones, d, heads, heads_kv, hd)
    _add_ffn(w, b, noise, d, ffn)
    w.add_tensor(f"{b}.nextn.eh_proj.weight", noise(d, 2 * d))
    w.add_tensor(f"{b}.nextn.enorm.weight", ones(d))
    w.add_tensor(f"{b}.nextn.hnorm.weight", ones(d))
    w.add_tensor(f"{b}.nextn.shared_head_norm.weight", ones(d))


def _add_full_attention(w, b: str, noise, ones, d: int, heads: int, heads_kv: int,
                        hd: int) -> None:
    """Gated full attention: q carries its gate."""
    w.add_tensor(f"{b}.attn_q.weight", noise(hd * heads * 2, d))
    w.add_tensor(f"{b}.attn_k.weight", noise(hd * heads_kv, d))
    w.add_tensor(f"{b}.attn_v.weight", noise(hd * heads_kv, d))
    w.add_tensor(f"{b}.attn_output.weight", noise(d, hd * heads))
    w.add_tensor(f"{b}.attn_q_norm.weight", ones(hd))
    w.add_tensor(f"{b}.attn_k_norm.weight", ones(hd))


def _add_ffn(w, b: str, noise, d: int, ffn: int) -> None:
    w.add_tensor(f"{b}.ffn_gate.weight", noise(ffn, d))
    w.add_tensor(f"{b}.ffn_up.weight", noise(ffn, d))
    w.add_tensor(f"{b}.ffn_down.weight", noise(d, ffn))


if __name__ == "__main__":
    out = write_tiny_qwen35(Path(sys.argv[1]), nextn=int("--nextn" in sys.argv[2:]))
    print(f"{out} ({out.stat().st_size} bytes)")
