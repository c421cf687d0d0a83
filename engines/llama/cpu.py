"""What the llama.cpp build may do on this CPU (pure; no llama.cpp import)."""
from __future__ import annotations

import sys


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo's ``flags`` lines (``cpuinfo``: that
    file's text, read when None); empty where there is none (macOS, an ARM host's
    ``Features``, no /proc)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return set()
    return {flag for line in cpuinfo.splitlines() if line.startswith("flags")
            for flag in line.partition(":")[2].split()}


def extra_buffers_ok(cpuinfo: str | None = None) -> bool:
    """Whether llama.cpp may keep CPU weights in its extra buffer types (repacked layouts,
    AMX tiles). Not on a CPU with AMX: the AMX matmul of the llama.cpp in llama-cpp-python
    0.3.36, built with -march=native there, dies with SIGSEGV on the first prompt of a few
    tokens (seen on a Sapphire Rapids host). That also leaves out the repacked layouts,
    which would trade prefill for decode speed there (``bench/cpu_repack.py``). ``cpuinfo``
    is /proc/cpuinfo's text (read when None; a host without it, such as macOS, has no
    AMX)."""
    return "amx_tile" not in cpu_flags(cpuinfo)


def reads_weights(backend: str, rpc_split: bool = False, platform: str = sys.platform) -> bool:
    """Whether a chat model's weights are read into the process's memory rather than mapped
    from the file: on Linux, with a CPU build of llama.cpp (``backend``, ``devices.
    llama_backend()``) and no RPC split. There the weights come to lie in anonymous memory,
    in huge pages where ``hypnos serve`` turned them on (``cli/malloc_thp``), and
    Qwen2.5-Coder-0.5B decodes 8-9 % faster single-stream and about 3 % at 4 streams than
    from the mapped file (bench/README.md, ``--default-model``). A GPU build keeps the
    mapping: read weights that stay on the host would go to pinned memory there, which is
    not measured. Nothing else changes: the file is read once at load, its pages stay in
    the page cache only as long as the kernel has no better use for them."""
    return platform.startswith("linux") and backend == "cpu" and not rpc_split
