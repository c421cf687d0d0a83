"""A tiny random-weight Gemma 4 GGUF that the pinned llama.cpp loads, carrying Gemma 4's
published chat template.

No Gemma 4 weights can be fetched here (no model hub), and the smallest real file is 3 GB.
This writes the family's real file format instead: ``general.architecture = "gemma4"``, the
hyperparameter keys and tensor names llama.cpp's ``gemma4`` loader reads (two layers, one
sliding-window and one full-attention, no per-layer embeddings, as in the 26B and 31B), and a
``gemma4`` BPE vocabulary with Gemma 4's control and visible markers (``<|turn>``,
``<|tool_call>``, ``<|"|>``, ``<|channel>``, ...), byte fallback tokens and the printable
ASCII characters. The template is the one Google publishes with the instruction-tuned models
(``tests/data/templates/gemma-4-it.jinja``, as vendored by llama.cpp in
``models/templates/google-gemma-4-31B-it.jinja``).

The weights are noise: a model built from this file proves the plumbing (the loader accepts
the family's keys and tensors, the template renders through the engine, the tool and thinking
dialects detected are the family's, a forced call comes out under the grammar and parses),
never what a Gemma 4 model would answer.

Shapes: gguf-py stores a numpy array of shape (a, b) as a ggml tensor with ne = [b, a].

    python tests/tiny_gemma4.py OUT.gguf
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tiny_gguf import Weights, finish

TEMPLATE = Path(__file__).resolve().parent / "data" / "templates" / "gemma-4-it.jinja"
ARCH = "gemma4"

#: Markers the template writes that are never shown (CONTROL in the real vocabulary).
CONTROL = ["<|turn>", "<turn|>", "<|think|>", "<|tool>", "<tool|>", "<|image|>", "<|audio|>",
           "<|video|>"]
#: Markers llama.cpp's converter marks USER_DEFINED so that a chat parser can read them.
VISIBLE = ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
           "<tool_response|>", '<|"|>']


@dataclass(frozen=True)
class TinyGemma4:
    n_embd: int = 64
    heads: int = 2
    heads_kv: int = 1
    head_dim: int = 32
    ffn: int = 128
    context: int = 4096
    window: int = 512
    seed: int = 0


def vocabulary() -> tuple[list[str], list[int], list[str]]:
    """Tokens, their gguf token types, and the BPE merges."""
    import gguf
    tt = gguf.TokenType
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"]
    types = [tt.CONTROL, tt.CONTROL, tt.CONTROL, tt.UNKNOWN]
    tokens += CONTROL
    types += [tt.CONTROL] * len(CONTROL)
    tokens += VISIBLE
    types += [tt.USER_DEFINED] * len(VISIBLE)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [tt.BYTE] * 256
    normal = ["\n", "\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    merged = ["\u2581" + c for c in "abcdefghijklmnopqrstuvwxyz"]
    tokens += normal + merged
    types += [tt.NORMAL] * (len(normal) + len(merged))
    merges = [f"\u2581 {c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    return tokens, types, merges


def write_tiny_gemma4(path: Path, spec: TinyGemma4 = TinyGemma4(),
                      template: str | None = None, split_tensors: int = 0) -> Path:
    """Write the model to ``path`` and return it. Deterministic for a given spec.
    ``split_tensors``: write a split GGUF as gguf-split does (a metadata-only first part,
    then parts of at most that many tensors, ``NAME-00001-of-0000N.gguf``), and return the
    first part."""
    import gguf

    tokens, types, merges = vocabulary()
    layers = 2
    swa = [True, False]                  # layer 0 sliding-window, layer 1 full attention
    hd, d = spec.head_dim, spec.n_embd

    w = gguf.GGUFWriter(str(path), ARCH, split_max_tensors=split_tensors,
                        small_first_shard=bool(split_tensors))
    w.add_name("tiny-random-gemma4")
    w.add_context_length(spec.context)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(spec.ffn)
    _add_attention_keys(w, ARCH, spec, swa)
    w.add_uint32(f"{ARCH}.attention.shared_kv_layers", 0)
    w.add_uint32(f"{ARCH}.embedding_length_per_layer_input", 0)
    w.add_float32(f"{ARCH}.final_logit_softcapping", 30.0)

    _add_vocab(w, tokens, types, merges)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)
    w.add_chat_template(template if template is not None else TEMPLATE.read_text())

    noise, ones = Weights(spec.seed).noise, Weights.ones

    w.add_tensor("token_embd.weight", noise(len(tokens), d))
    w.add_tensor("output_norm.weight", ones(d))
    w.add_tensor("rope_freqs.weight", ones(hd // 2))
    for i in range(layers):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(d))
        w.add_tensor(f"{b}.attn_q.weight", noise(hd * spec.heads, d))
        w.add_tensor(f"{b}.attn_k.weight", noise(hd * spec.heads_kv, d))
        w.add_tensor(f"{b}.attn_v.weight", noise(hd * spec.heads_kv, d))
        w.add_tensor(f"{b}.attn_output.weight", noise(d, hd * spec.heads))
        w.add_tensor(f"{b}.attn_q_norm.weight", ones(hd))
        w.add_tensor(f"{b}.attn_k_norm.weight", ones(hd))
        w.add_tensor(f"{b}.post_attention_norm.weight", ones(d))
        _add_ffn(w, b, d, spec.ffn, ones, noise)
    finish(w)
    if split_tensors:
        return sorted(path.parent.glob(path.stem + "-00001-of-*.gguf"))[0]
    return path


@dataclass(frozen=True)
class TinyAssistant:
    """A Gemma 4 assistant (MTP draft head, ``gemma4-assistant``) for ``TinyGemma4``: narrower
    inside than its target, reading and giving hidden states of the target's width."""
    n_embd: int = 32
    ffn: int = 64
    seed: int = 1


def write_tiny_gemma4_assistant(path: Path, target: TinyGemma4 = TinyGemma4(),
                                spec: TinyAssistant = TinyAssistant()) -> Path:
    """Write a random-weight ``gemma4-assistant`` GGUF for ``target`` to ``path``: the file
    format of Gemma 4's separate MTP heads (``mtp-gemma-4-*.gguf``): every block is an MTP
    block (``nextn_predict_layers == block_count``), attention is query-only (it reads the
    target's KV), ``nextn.pre_projection`` maps [token embedding, target hidden state] in,
    ``nextn.post_projection`` gives the next hidden state out. Plumbing only: noise weights."""
    import gguf

    arch, layers, swa = "gemma4-assistant", 2, [True, False]
    tokens, types, merges = vocabulary()
    hd, d, back = target.head_dim, spec.n_embd, target.n_embd
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-random-gemma4-assistant")
    w.add_context_length(target.context)
    w.add_embedding_length(d)
    w.add_uint32(f"{arch}.embedding_length_out", back)
    w.add_block_count(layers)
    w.add_uint32(f"{arch}.nextn_predict_layers", layers)
    w.add_feed_forward_length(spec.ffn)
    _add_attention_keys(w, arch, target, swa)
    _add_vocab(w, tokens, types, merges)

    noise, ones = Weights(spec.seed).noise, Weights.ones
    w.add_tensor("token_embd.weight", noise(len(tokens), d))
    w.add_tensor("output_norm.weight", ones(d))
    w.add_tensor("rope_freqs.weight", ones(hd // 2))
    w.add_tensor("nextn.pre_projection.weight", noise(d, 2 * back))
    w.add_tensor("nextn.post_projection.weight", noise(back, d))
    for i in range(layers):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(d))
        w.add_tensor(f"{b}.attn_q.weight", noise(hd * target.heads, d))
        w.add_tensor(f"{b}.attn_output.weight", noise(d, hd * target.heads))
        w.add_tensor(f"{b}.attn_q_norm.weight", ones(hd))
        w.add_tensor(f"{b}.post_attention_norm.weight", ones(d))
        w.add_tensor(f"{b}.layer_output_scale.weight", ones(1))
        _add_ffn(w, b, d, spec.ffn, ones, noise)
    finish(w)
    return path


def _add_ffn(w, b: str, d: int, ffn: int, ones, noise) -> None:
    """Block ``b``'s feed-forward half (the target's and the assistant head's alike)."""
    w.add_tensor(f"{b}.ffn_norm.weight", ones(d))
    w.add_tensor(f"{b}.ffn_gate.weight", noise(ffn, d))
    w.add_tensor(f"{b}.ffn_up.weight", noise(ffn, d))
    w.add_tensor(f"{b}.ffn_down.weight", noise(d, ffn))
    w.add_tensor(f"{b}.post_ffw_norm.weight", ones(d))


def _add_attention_keys(w, arch: str, spec: TinyGemma4, swa: list[bool]) -> None:
    """The attention and RoPE keys of ``spec``'s shape (heads, head size, sliding window
    every layer ``swa`` marks), under ``arch``."""
    hd = spec.head_dim
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.heads_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1_000_000.0)
    w.add_rope_dimension_count(hd)
    w.add_sliding_window(spec.window)
    w.add_array(f"{arch}.attention.sliding_window_pattern", swa)
    w.add_uint32(f"{arch}.attention.key_length_swa", hd)
    w.add_uint32(f"{arch}.attention.value_length_swa", hd)
    w.add_uint32(f"{arch}.rope.dimension_count_swa", hd)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10_000.0)


def _add_vocab(w, tokens, types, merges) -> None:
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_pad_token_id(0)
    w.add_unk_token_id(3)


if __name__ == "__main__":
    out = write_tiny_gemma4(Path(sys.argv[1]))
    print(f"{out} ({out.stat().st_size} bytes)")
