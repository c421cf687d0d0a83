"""Checking a text against a GBNF grammar with llama.cpp's own grammar engine, no model.

libllama exports its grammar internals (C++ symbols, the ones llama.cpp's own
``tests/test-grammar-integration.cpp`` drives): ``llama_grammar_init_impl`` with no vocab
parses the grammar, ``llama_grammar_accept`` advances it by one code point, and the grammar's
stacks say whether it is still alive (some stack) and whether it may end here (an empty
stack). The sampler the engine builds runs this same code on every token's text, so a text
this accepts is one the engine lets a model write, and one it refuses the engine never lets
through. Test support only.
"""
from __future__ import annotations

import ctypes
import pathlib

_INIT = "_Z23llama_grammar_init_implPK11llama_vocabPKcS3_bPS3_mPKim"
_ACCEPT = "_Z20llama_grammar_acceptP13llama_grammarj"
_STACKS = "_Z24llama_grammar_get_stacksP13llama_grammar"
_FREE = "_Z23llama_grammar_free_implP13llama_grammar"


class _Vector(ctypes.Structure):              # libstdc++'s std::vector: three pointers
    _fields_ = [("begin", ctypes.c_void_p), ("end", ctypes.c_void_p),
                ("cap", ctypes.c_void_p)]


def _library():
    import llama_cpp
    path = pathlib.Path(llama_cpp.__file__).parent / "lib" / "libllama.so"
    lib = ctypes.CDLL(str(path))
    init = getattr(lib, _INIT)
    init.restype = ctypes.c_void_p
    init.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_bool,
                     ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    accept = getattr(lib, _ACCEPT)
    accept.restype, accept.argtypes = None, [ctypes.c_void_p, ctypes.c_uint32]
    stacks = getattr(lib, _STACKS)
    stacks.restype, stacks.argtypes = ctypes.POINTER(_Vector), [ctypes.c_void_p]
    free = getattr(lib, _FREE)
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    return init, accept, stacks, free


_LIB = None


def _lib():
    global _LIB
    if _LIB is None:
        _LIB = _library()
    return _LIB


def _stacks(stacks_fn, grammar) -> list[bool]:
    """For each live stack of ``grammar``: whether it is empty (the grammar may end)."""
    vec = stacks_fn(grammar).contents
    n = (vec.end - vec.begin) // ctypes.sizeof(_Vector) if vec.begin else 0
    inner = (_Vector * n).from_address(vec.begin) if n else []
    return [v.begin == v.end for v in inner]


def parses(gbnf: str) -> bool:
    """llama.cpp parses ``gbnf`` (root rule ``root``, every rule defined, no left recursion)."""
    init, _, _, free = _lib()
    grammar = init(None, gbnf.encode(), b"root", False, None, 0, None, 0)
    if not grammar:
        return False
    free(grammar)
    return True


def accepts(gbnf: str, text: str) -> bool:
    """The grammar admits ``text`` whole: every code point is allowed, and it may end there."""
    init, accept, stacks_fn, free = _lib()
    grammar = init(None, gbnf.encode(), b"root", False, None, 0, None, 0)
    assert grammar, "llama.cpp refused the grammar"
    try:
        for ch in text:
            accept(grammar, ord(ch))
            if not _stacks(stacks_fn, grammar):
                return False
        return any(_stacks(stacks_fn, grammar))
    finally:
        free(grammar)
