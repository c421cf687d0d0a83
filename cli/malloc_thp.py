"""Transparent huge pages for the server's large allocations, through glibc's malloc tunable.

A promotion from a kept engine (tier 2 -> 1 on a host computing from host memory) allocates
and clears a fresh KV cache; with 4 KiB pages most of that time is page faults (SmolLM2 at
2,048 tokens: 45 MiB, about 21 ms to build the context, 8 ms with huge pages). llama.cpp
allocates through malloc, and glibc (>= 2.35) advises its large mappings MADV_HUGEPAGE when
``GLIBC_TUNABLES`` holds ``glibc.malloc.hugetlb=1``, read once at process start. Where the
kernel's THP mode is "madvise" (most distributions), `hypnos serve` therefore re-executes
itself once with the tunable added. Nothing happens when it is already set, on another libc,
when THP is "always" (nothing to gain) or "never" (nothing to use), or with
``HYPNOS_MALLOC_THP=0``.
"""
from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from itertools import pairwise

TUNABLE = "glibc.malloc.hugetlb"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def reexec_env(environ: Mapping[str, str], libc: tuple[str, str],
               thp_mode: str | None) -> dict[str, str] | None:
    """The environment to re-execute the server with, or None when there is nothing to do.
    ``libc``: ``platform.libc_ver()``; ``thp_mode``: the bracketed word of the kernel's THP
    setting (None when unknown)."""
    if environ.get("HYPNOS_MALLOC_THP", "1") == "0" or thp_mode != "madvise":
        return None
    name, version = libc
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return None
    if name != "glibc" or (major, minor) < (2, 35):
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if TUNABLE in tunables:
        return None
    value = f"{tunables}:{TUNABLE}=1" if tunables else f"{TUNABLE}=1"
    return {**environ, "GLIBC_TUNABLES": value}


def thp_mode(path: str = THP_ENABLED) -> str | None:
    """"always", "madvise" or "never" (the bracketed one), None when unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def launched_as_cli(argv: list[str]) -> bool:
    """Whether this process is the ``hypnos`` command itself (the console script, or
    ``python -m hypnos.cli``), the only kind it is safe to re-execute: ``serve`` called inside
    another program (a test runner's CliRunner, an embedding script) is left alone."""
    if not argv:
        return False
    if os.path.basename(argv[0]) == "hypnos":
        return True
    if len(argv) > 1 and os.path.basename(argv[1]) == "hypnos":     # python .venv/bin/hypnos
        return True
    return any(a == "-m" and nxt in ("hypnos.cli", "hypnos.cli.main")
               for a, nxt in pairwise(argv))


def reexec_with_thp() -> None:
    """Re-execute this process (same argv, same pid) with the tunable when it helps and the
    process is the ``hypnos`` command. Call it first thing, before threads start."""
    if not launched_as_cli(sys.orig_argv):
        return
    env = reexec_env(os.environ, platform.libc_ver(), thp_mode())
    if env is not None:
        os.execve(sys.executable, sys.orig_argv, env)
