"""Synthetic ``llama``-architecture GGUFs of a chosen size, F16 noise weights, written in
seconds: what the GPU check (bench/gpu_check.py, issue 27) loads on a machine that nothing
large can travel to.

    python bench/synthetic_gguf.py OUT.gguf --size-mib 1024 [--seed 0]

The vocabulary is tests/tiny_gguf.py's byte-level BPE (any text tokenizes) padded with
plain tokens up to the shape's vocabulary, plus ChatML markers and template. Every tensor is
a contiguous slice of one shared noise pool (``pool`` values, a seed-dependent offset each),
so writing 8 GiB costs the disk's time, not the random generator's. The weights are noise:
nothing here says what a model answers (tests/tiny_llama.py on the specbench branch is a
fixed 2-layer model with SmolLM2's vocabulary; this one is sized and self-contained).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tiny_gguf import byte_symbols, finish  # noqa: E402

ARCH = "llama"
MIB = 2**20
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
BYTES = 2  # F16


@dataclass(frozen=True)
class Shape:
    width: int
    ffn: int
    heads: int
    heads_kv: int
    vocab: int
    layers: int

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def layer_params(self) -> int:
        kv = self.head_dim * self.heads_kv
        return 2 * self.width * self.width + 2 * self.width * kv + 3 * self.width * self.ffn

    def file_bytes(self) -> int:
        """The tensor bytes (the file adds a few KiB of header and vocabulary)."""
        return BYTES * (self.layers * self.layer_params() + 2 * self.vocab * self.width)


# (width, ffn, heads, heads_kv, vocab), smallest first; a size takes the largest family whose
# embeddings and one layer fit in it with room for two layers.
FAMILIES = ((256, 704, 4, 2, 4096), (2048, 5632, 16, 4, 32000), (4096, 11008, 32, 8, 32000))
#: The default chat model's shape (Qwen2.5-Coder-0.5B: 24 layers of 896, 14 heads over 2 KV
#: heads, its 151,936-token vocabulary), for costs that depend on the shape and not on what
#: the weights say (the GPU check's step costs, issue 39). Qwen2's attention biases are left
#: out: a few thousand additions a layer.
QWEN25_05B = Shape(width=896, ffn=4864, heads=14, heads_kv=2, vocab=151936, layers=24)


def shape_for(size_bytes: int) -> Shape:
    """The shape whose tensors come closest to ``size_bytes`` from below (at least one layer).
    Pure."""
    if size_bytes <= 0:
        raise ValueError(f"size must be positive, got {size_bytes}")
    chosen = Shape(*FAMILIES[0], layers=1)
    for fam in FAMILIES:
        probe = Shape(*fam, layers=1)
        emb = probe.file_bytes() - BYTES * probe.layer_params()
        if emb + 2 * BYTES * probe.layer_params() <= size_bytes:
            chosen = probe
    emb = chosen.file_bytes() - BYTES * chosen.layer_params()
    layers = max(1, (size_bytes - emb) // (BYTES * chosen.layer_params()))
    return Shape(chosen.width, chosen.ffn, chosen.heads, chosen.heads_kv, chosen.vocab, layers)


def tensor_shapes(s: Shape) -> dict[str, tuple[int, ...]]:
    """Every tensor's numpy shape (gguf-py stores (a, b) as ne = [b, a])."""
    kv = s.head_dim * s.heads_kv
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (s.vocab, s.width),
                                          "output_norm.weight": (s.width,),
                                          "output.weight": (s.vocab, s.width)}
    for i in range(s.layers):
        b = f"blk.{i}"
        shapes.update({f"{b}.attn_norm.weight": (s.width,),
                       f"{b}.attn_q.weight": (s.width, s.width),
                       f"{b}.attn_k.weight": (kv, s.width), f"{b}.attn_v.weight": (kv, s.width),
                       f"{b}.attn_output.weight": (s.width, s.width),
                       f"{b}.ffn_norm.weight": (s.width,),
                       f"{b}.ffn_gate.weight": (s.ffn, s.width),
                       f"{b}.ffn_up.weight": (s.ffn, s.width),
                       f"{b}.ffn_down.weight": (s.width, s.ffn)})
    return shapes


def add_vocab(w, vocab: int) -> None:
    """tests/tiny_gguf.py's byte symbols, " a".." z" merged, ChatML markers (CONTROL), then
    plain tokens ``<rN>`` up to ``vocab``; bos/pad ``<|endoftext|>``, eos ``<|im_end|>``."""
    import gguf
    symbols = byte_symbols()
    space = symbols[ord(" ")]
    merged = [space + c for c in "abcdefghijklmnopqrstuvwxyz"]
    pad = vocab - (len(symbols) + len(merged) + len(CONTROL))
    if pad < 0:
        raise ValueError(f"vocabulary {vocab} is smaller than the byte-level base")
    tokens = symbols + merged + CONTROL + [f"<r{i}>" for i in range(pad)]
    tt = gguf.TokenType
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([tt.NORMAL] * (len(symbols) + len(merged)) + [tt.CONTROL] * len(CONTROL)
                      + [tt.NORMAL] * pad)
    w.add_token_merges([f"{space} {c}" for c in "abcdefghijklmnopqrstuvwxyz"])
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(TEMPLATE)


def write(path: Path, size_bytes: int, seed: int = 0, shape: Shape | None = None) -> Shape:
    """Write a llama GGUF of about ``size_bytes`` (never more, plus its header) to ``path``, or
    of ``shape`` when one is given, and return its shape. Deterministic for a given size (or
    shape) and seed."""
    import gguf
    s = shape or shape_for(size_bytes)
    size_bytes = s.file_bytes() if shape else size_bytes
    shapes = tensor_shapes(s)
    largest = max(int(np.prod(v)) for v in shapes.values())
    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(largest + 65536, dtype=np.float32) * 0.02).astype(np.float16)
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name(f"synthetic-llama-{size_bytes // MIB}mib")
    w.add_context_length(8192)
    w.add_embedding_length(s.width)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.heads_kv)
    w.add_rope_dimension_count(s.head_dim)
    w.add_rope_freq_base(10_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    add_vocab(w, s.vocab)
    w.add_vocab_size(s.vocab)
    for name, shape in shapes.items():
        n = int(np.prod(shape))
        if name.endswith("norm.weight"):
            w.add_tensor(name, np.ones(shape, dtype=np.float32))
            continue
        start = int(rng.integers(0, len(pool) - n + 1))
        w.add_tensor(name, pool[start:start + n].reshape(shape))
    finish(w)
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size-mib", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    s = write(args.out, args.size_mib * MIB, args.seed)
    print(f"{args.out}: {args.out.stat().st_size / MIB:.1f} MiB, {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
