"""What the tiny random-weight GGUF builders (tests/tiny_*.py) share: noise weights, and a
byte-level BPE vocabulary (the 256 byte symbols of GPT-2's table, a few merges, the family's
markers) such as gpt-oss and Qwen write, so that any text tokenizes."""
from __future__ import annotations

import numpy as np


class Weights:
    """Deterministic noise and ones, float32, numpy shapes (gguf-py stores shape (a, b) as
    ne = [b, a])."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def noise(self, *shape: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) * 0.02).astype(np.float32)

    @staticmethod
    def ones(*shape: int) -> np.ndarray:
        return np.ones(shape, dtype=np.float32)


def byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table: the symbol byte-level BPE writes for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def add_byte_level_vocab(w, pre: str, control: list[str], visible: list[str],
                         template: str, *, bos: str, eos: str, pad: str) -> list[str]:
    """Write a ``gpt2`` vocabulary with pre-tokenizer ``pre``: the byte symbols, " a".." z"
    merged, then ``control`` (CONTROL) and ``visible`` (USER_DEFINED) markers; returns the
    tokens."""
    import gguf
    symbols = byte_symbols()
    space = symbols[ord(" ")]
    merged = [space + c for c in "abcdefghijklmnopqrstuvwxyz"]
    tokens = symbols + merged + control + visible
    tt = gguf.TokenType
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([tt.NORMAL] * (len(symbols) + len(merged)) + [tt.CONTROL] * len(control)
                      + [tt.USER_DEFINED] * len(visible))
    w.add_token_merges([f"{space} {c}" for c in "abcdefghijklmnopqrstuvwxyz"])
    w.add_bos_token_id(tokens.index(bos))
    w.add_eos_token_id(tokens.index(eos))
    w.add_pad_token_id(tokens.index(pad))
    w.add_add_bos_token(False)
    w.add_chat_template(template)
    return tokens


def finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
