"""A tiny random-weight ``llama`` GGUF carrying a real model's vocabulary (by default
SmolLM2's 49,152 tokens, their merges, special ids and chat template, copied from its GGUF).

Two 64-wide layers make a decode step cost about what a GPU step of a small model does (the
49,152-row output matrix dominates it), so the fixed cost a serving loop adds to every token
shows: ``bench/llama_server.py --tiny`` runs Hypnos and llama-server on this file. The
weights are noise; nothing here says what a model would answer.

    python tests/tiny_llama.py OUT.gguf [SOURCE.gguf]
"""
from __future__ import annotations

import sys
from pathlib import Path

from tiny_gguf import Weights, finish

ARCH = "llama"
#: Where the vocabulary comes from unless told: the catalog's smallest llama-family model.
SMOLLM2 = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
WIDTH, LAYERS, HEADS, HEADS_KV, FFN = 64, 2, 4, 2, 128


def copy_tokenizer(w, source: Path) -> int:
    """Write every ``tokenizer.*`` key of the GGUF ``source`` into the writer ``w``, typed as
    there; returns the number of tokens."""
    import gguf
    reader = gguf.GGUFReader(str(source))
    n_tokens = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[1] if main == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        w.add_key_value(key, value, main, sub_type=sub)
        if key == "tokenizer.ggml.tokens":
            n_tokens = len(value)
    if not n_tokens:
        raise ValueError(f"{source} carries no tokenizer.ggml.tokens")
    return n_tokens


def write_tiny_llama(path: Path, source: Path, seed: int = 0) -> Path:
    """Write the model to ``path`` with ``source``'s vocabulary and return it. Deterministic
    for a given seed and source."""
    import gguf
    hd = WIDTH // HEADS
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name("tiny-random-llama")
    w.add_context_length(8192)
    w.add_embedding_length(WIDTH)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS_KV)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(100_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    n_vocab = copy_tokenizer(w, source)
    w.add_vocab_size(n_vocab)
    noise, ones = Weights(seed).noise, Weights.ones
    w.add_tensor("token_embd.weight", noise(n_vocab, WIDTH))
    w.add_tensor("output_norm.weight", ones(WIDTH))
    w.add_tensor("output.weight", noise(n_vocab, WIDTH))
    for i in range(LAYERS):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(WIDTH))
        w.add_tensor(f"{b}.attn_q.weight", noise(hd * HEADS, WIDTH))
        w.add_tensor(f"{b}.attn_k.weight", noise(hd * HEADS_KV, WIDTH))
        w.add_tensor(f"{b}.attn_v.weight", noise(hd * HEADS_KV, WIDTH))
        w.add_tensor(f"{b}.attn_output.weight", noise(WIDTH, hd * HEADS))
        w.add_tensor(f"{b}.ffn_norm.weight", ones(WIDTH))
        w.add_tensor(f"{b}.ffn_gate.weight", noise(FFN, WIDTH))
        w.add_tensor(f"{b}.ffn_up.weight", noise(FFN, WIDTH))
        w.add_tensor(f"{b}.ffn_down.weight", noise(WIDTH, FFN))
    finish(w)
    return path


if __name__ == "__main__":
    src = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        Path(__file__).resolve().parents[1] / "models" / SMOLLM2
    out = write_tiny_llama(Path(sys.argv[1]), src)
    print(f"{out} ({out.stat().st_size} bytes)")


def load_tiny_engine(folder: Path, source: Path, slots: int, threads: int):
    """A ``LlamaChatEngine`` loaded with a tiny llama written in ``folder`` (1,024 tokens of
    context over ``slots`` slots); the caller unloads it."""
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import LoadSpec
    path = write_tiny_llama(folder / "tiny.gguf", source)
    engine = LlamaChatEngine()
    engine.load(LoadSpec("tiny", path, context_len=1024, slots=slots, threads=threads))
    return engine
