"""What the llama.cpp build may do on this CPU (pure; no llama.cpp import)."""
from __future__ import annotations


def extra_buffers_ok(cpuinfo: str | None = None) -> bool:
    """Whether llama.cpp may keep CPU weights in its extra buffer types (repacked layouts,
    AMX tiles). Not on a CPU with AMX: the AMX matmul of the llama.cpp in llama-cpp-python
    0.3.36, built with -march=native there, dies with SIGSEGV on the first prompt of a few
    tokens (seen on a Sapphire Rapids host). ``cpuinfo`` is /proc/cpuinfo's text (read when
    None; a host without it, such as macOS, has no AMX)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return True
    return not any("amx_tile" in line.split() for line in cpuinfo.splitlines()
                   if line.startswith("flags"))
