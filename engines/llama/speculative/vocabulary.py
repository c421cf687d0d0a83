"""What prompt lookup asks of a loaded model's vocabulary: each token's spelling name
(``respelled.Spelling``) and the control tokens, where a chat template's messages begin and
end (``drafts.NgramDrafter`` never drafts across one). The drafters stay pure; these two read
llama.cpp through ctypes (``ll``: ``llama_cpp.llama_cpp``).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

from hypnos.engines.llama.speculative.respelled import Spelling


def llama_spelling(ll, vocab) -> Spelling:
    """A ``Spelling`` over a loaded llama.cpp vocabulary.

    Threading: one caller at a time. Every call shares the two ctypes buffers below (and the
    ``Spelling``'s cache); the engine's decode thread, which drafts, is the only caller."""
    buf = ctypes.create_string_buffer(256)
    ids = (ll.llama_token * 4)()

    def piece(token: int) -> bytes:
        n = ll.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n] if n > 0 else b""

    def single(text: bytes) -> int | None:
        n = ll.llama_tokenize(vocab, text, len(text), ids, len(ids), False, False)
        return ids[0] if n == 1 else None

    return Spelling(piece, single)


#: Control tokens by weights file (path, size, modification time): a model loaded again
#: (swapped back in) does not read its vocabulary again.
_BY_FILE: dict[tuple[str, int, int], frozenset[int]] = {}


def control_tokens(ll, vocab, weights: Path | None = None) -> frozenset[int]:
    """The vocabulary's control tokens (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``
    and the like): one pass over the vocabulary, about 50 ms for 151,000 tokens, once per
    ``weights`` file (the file the vocabulary was loaded from; None: not kept)."""
    key = None
    if weights is not None:
        st = weights.stat()
        key = (str(weights), st.st_size, st.st_mtime_ns)
        known = _BY_FILE.get(key)
        if known is not None:
            return known
    found = frozenset(t for t in range(ll.llama_vocab_n_tokens(vocab))
                      if ll.llama_vocab_is_control(vocab, t))
    if key is not None:
        _BY_FILE[key] = found
    return found
