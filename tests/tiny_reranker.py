"""A tiny random-weight reranker GGUF of the real format: a 2-layer, 32-wide BERT encoder
with llama.cpp's rank pooling (``bert.pooling_type`` 4) and the classification head rank
pooling reads (``cls`` dense + tanh, then ``cls.output`` to one score), over a WordPiece
vocabulary of the lowercase letters (any lowercase ASCII text tokenizes; anything else is
[UNK]).

Its scores mean nothing (the weights are noise): it exercises the rank-pooling plumbing and
its throughput, nothing about ranking quality.

    python tests/tiny_reranker.py OUT.gguf
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_gguf import Weights, finish  # noqa: E402

EMBD = 32
HEADS = 2
LAYERS = 2
FFN = 64
CONTEXT = 256
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def vocabulary() -> list[str]:
    """The specials, then each character as a word start ("\u2581a", llama.cpp's WordPiece
    form of a whole-word piece) and as a continuation ("a", BERT's "##a")."""
    return SPECIALS + ["\u2581" + c for c in LETTERS] + list(LETTERS) + \
        ["\u2581" + p for p in ".,?!'-:;()"]


def write_tiny_reranker(path: Path, seed: int = 0) -> Path:
    """Write the GGUF to ``path``; returns it."""
    import gguf
    w = gguf.GGUFWriter(str(path), "bert")
    rnd = Weights(seed)
    tokens = vocabulary()
    w.add_name("tiny-reranker")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(EMBD)
    w.add_feed_forward_length(FFN)
    w.add_block_count(LAYERS)
    w.add_head_count(HEADS)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.RANK)
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    tt = gguf.TokenType
    w.add_token_types([tt.CONTROL] * len(SPECIALS) + [tt.NORMAL] * (len(tokens) - len(SPECIALS)))
    w.add_token_type_count(2)
    w.add_bos_token_id(tokens.index("[CLS]"))
    w.add_sep_token_id(tokens.index("[SEP]"))
    w.add_eos_token_id(tokens.index("[SEP]"))
    w.add_unk_token_id(tokens.index("[UNK]"))
    w.add_pad_token_id(tokens.index("[PAD]"))
    w.add_mask_token_id(tokens.index("[MASK]"))
    # [CLS] query [SEP] document [SEP]: BOS and EOS added, no separate SEP between the two.
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(False)

    def norm(name: str) -> None:
        w.add_tensor(f"{name}.weight", rnd.ones(EMBD))
        w.add_tensor(f"{name}.bias", rnd.noise(EMBD))

    def dense(name: str, n_out: int, n_in: int) -> None:
        w.add_tensor(f"{name}.weight", rnd.noise(n_out, n_in) * 20)
        w.add_tensor(f"{name}.bias", rnd.noise(n_out))

    w.add_tensor("token_embd.weight", rnd.noise(len(tokens), EMBD) * 20)
    w.add_tensor("token_types.weight", rnd.noise(2, EMBD))
    w.add_tensor("position_embd.weight", rnd.noise(CONTEXT, EMBD))
    norm("token_embd_norm")
    for i in range(LAYERS):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            dense(f"blk.{i}.{part}", EMBD, EMBD)
        norm(f"blk.{i}.attn_output_norm")
        dense(f"blk.{i}.ffn_up", FFN, EMBD)
        dense(f"blk.{i}.ffn_down", EMBD, FFN)
        norm(f"blk.{i}.layer_output_norm")
    dense("cls", EMBD, EMBD)
    dense("cls.output", 1, EMBD)
    finish(w)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/tiny_reranker.py OUT.gguf")
    print(write_tiny_reranker(Path(sys.argv[1])))
