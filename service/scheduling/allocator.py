"""glibc's allocator, told to give back what an unloaded engine freed.

Engines allocate from whichever worker thread loads or serves them, and glibc gives each
thread an arena of its own (up to 8 per core). What an engine frees on unload goes back to
those arenas, not to the system: a chat model, a speech model and an embedder loaded and
unloaded in turn left the process 30-40 MiB larger per cycle (bench/README.md, soak.py).
Two remedies, both no-ops off glibc:

- ``trim()`` after every unload (``HYPNOS_MALLOC_TRIM=0`` turns it off): ``malloc_trim(0)``
  returns the free pages of every arena to the system (``madvise(MADV_DONTNEED)``); it
  blocks for the walk (milliseconds).
- ``cap_arenas()`` at start-up: ``mallopt(M_ARENA_MAX, n)`` so the server's many worker
  threads share a few arenas instead of fragmenting dozens. It affects arenas created after
  the call: call it before threads start.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from functools import cache

M_ARENA_MAX = -8            # glibc's malloc.h
ARENA_MAX_DEFAULT = 2       # HYPNOS_MALLOC_ARENA_MAX; 0 leaves glibc's own default


@cache
def _libc() -> ctypes.CDLL | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def trim(environ=os.environ) -> bool:
    """Give the free pages of every malloc arena back to the system. Blocks (it walks the
    arenas); call it from a worker thread. False off glibc, or with ``HYPNOS_MALLOC_TRIM=0``
    (what bench/unload_memory.py measures it against)."""
    libc = _libc()
    if libc is None or environ.get("HYPNOS_MALLOC_TRIM", "1") == "0":
        return False
    libc.malloc_trim(0)
    return True


def arena_max(environ=os.environ) -> int:
    """The arena cap ``HYPNOS_MALLOC_ARENA_MAX`` asks for (default 2; 0: glibc's default);
    a value that is not a non-negative integer is the default."""
    raw = environ.get("HYPNOS_MALLOC_ARENA_MAX", "")
    return int(raw) if raw.isdigit() else ARENA_MAX_DEFAULT


def cap_arenas(n: int | None = None) -> bool:
    """``mallopt(M_ARENA_MAX, n)`` (``n``: `arena_max` by default); False when nothing was
    set (0, not glibc, or refused)."""
    n = arena_max() if n is None else n
    libc = _libc()
    if n <= 0 or libc is None:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, n))
