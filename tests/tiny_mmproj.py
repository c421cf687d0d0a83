"""A tiny random-weight vision projector (mmproj GGUF) that llama.cpp's clip/mtmd code loads.

Nothing on the package index carries a vision projector small enough for the tests, so this
writes one: a LLaVA-style ViT (``clip.projector_type = "mlp"``: patch embedding, class and
position embeddings, pre-LN, ``blocks`` pre-norm transformer blocks, post-LN, then the
``mm.0`` / GELU / ``mm.2`` MLP) with tiny dimensions and random weights. Its output width
must equal the text model's ``n_embd`` (576 for SmolLM2-135M), or ``mtmd_init_from_file``
refuses it. The weights are noise: the file proves the plumbing (keys, tensor names, shapes,
the encode and the decode of image embeddings), never what a model sees.

Shapes: gguf-py stores a numpy array of shape (a, b) as a ggml tensor with ne = [b, a], so a
ggml matrix used as ``W @ x`` with ne = [n_in, n_out] is written as numpy (n_out, n_in).

    python tests/tiny_mmproj.py OUT.gguf [--n-embd-text 576]
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: SmolLM2-135M's hidden size: the projector's output must match it.
SMOLLM2_N_EMBD = 576


@dataclass(frozen=True)
class TinyVision:
    n_embd_text: int = SMOLLM2_N_EMBD
    image_size: int = 32      # every image is resized to image_size x image_size
    patch_size: int = 8       # -> (32 / 8)^2 = 16 image tokens per image
    hidden: int = 32          # the ViT's width
    heads: int = 2
    ffn: int = 64
    blocks: int = 2           # LLaVA reads the second-to-last block's output
    proj_hidden: int = 64     # mm.0's width
    seed: int = 0

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def write_tiny_mmproj(path: Path, spec: TinyVision = TinyVision()) -> Path:
    """Write the projector GGUF to ``path`` and return it. Deterministic for a given spec."""
    import gguf

    rng = np.random.default_rng(spec.seed)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    h, p = spec.hidden, spec.patch_size
    w = gguf.GGUFWriter(str(path), arch="clip")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_name("hypnos tiny random mmproj")
    w.add_description("random weights: a plumbing test fixture, not a model")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type("mlp")
    w.add_vision_image_size(spec.image_size)
    w.add_vision_patch_size(p)
    w.add_vision_embedding_length(h)
    w.add_vision_feed_forward_length(spec.ffn)
    w.add_vision_projection_dim(spec.n_embd_text)
    w.add_vision_head_count(spec.heads)
    w.add_vision_attention_layernorm_eps(1e-5)
    w.add_vision_block_count(spec.blocks)
    w.add_vision_image_mean([0.5, 0.5, 0.5])
    w.add_vision_image_std([0.5, 0.5, 0.5])
    w.add_vision_use_gelu(True)

    # conv kernel ne = [p, p, 3, hidden]
    w.add_tensor("v.patch_embd.weight", rand(h, 3, p, p))
    w.add_tensor("v.class_embd", rand(h))
    w.add_tensor("v.position_embd.weight", rand(spec.n_patches + 1, h))
    w.add_tensor("v.pre_ln.weight", ones(h))
    w.add_tensor("v.pre_ln.bias", np.zeros(h, dtype=np.float32))
    for i in range(spec.blocks):
        blk = f"v.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(f"{blk}.{name}.weight", rand(h, h))
            w.add_tensor(f"{blk}.{name}.bias", rand(h))
        for name in ("ln1", "ln2"):
            w.add_tensor(f"{blk}.{name}.weight", ones(h))
            w.add_tensor(f"{blk}.{name}.bias", rand(h))
        w.add_tensor(f"{blk}.ffn_up.weight", rand(spec.ffn, h))
        w.add_tensor(f"{blk}.ffn_up.bias", rand(spec.ffn))
        w.add_tensor(f"{blk}.ffn_down.weight", rand(h, spec.ffn))
        w.add_tensor(f"{blk}.ffn_down.bias", rand(h))
    w.add_tensor("mm.0.weight", rand(spec.proj_hidden, h))
    w.add_tensor("mm.0.bias", rand(spec.proj_hidden))
    w.add_tensor("mm.2.weight", rand(spec.n_embd_text, spec.proj_hidden))
    w.add_tensor("mm.2.bias", rand(spec.n_embd_text))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--n-embd-text", type=int, default=SMOLLM2_N_EMBD)
    args = parser.parse_args()
    write_tiny_mmproj(args.out, TinyVision(n_embd_text=args.n_embd_text))
    print(args.out)


if __name__ == "__main__":
    main()
