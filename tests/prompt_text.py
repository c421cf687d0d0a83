"""The prompt a loaded llama engine would send for a request, detokenized with its markers
shown: what the tests of a family's template through the real engine read."""
import ctypes

from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest


def prompt_text(eng: LlamaChatEngine, messages, tools=None, **kw) -> str:
    tokens = eng._build(ChatRequest(messages=messages, tools=tools, **kw)).prompt
    ll = eng._ll
    arr = (ll.llama_token * len(tokens))(*tokens)
    cap = 16 * len(tokens) + 64
    buf = ctypes.create_string_buffer(cap)
    n = ll.llama_detokenize(eng._vocab, arr, len(tokens), buf, cap, False, True)
    assert n >= 0
    return buf.raw[:n].decode("utf-8", "replace")
