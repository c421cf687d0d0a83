"""Where a server's CPU time goes while it prefills: per thread, read from /proc.

With as many compute threads as cores, any other thread that runs takes a core from one of
them, and ggml's threads wait for each other at every operation. So besides each server's
own rate, ``llama_server.py --default-model`` reads every thread's CPU seconds around each
idle prefill (``read``) and splits them (``split``): the ``n`` busiest threads are taken to
be the compute threads (their share of the wall time: 100 % when nothing took a core from
them), the rest is the host's own work (event loop, reader, monitors) meanwhile. Linux only;
elsewhere ``read`` finds nothing and the split is (0, 0).
"""
from __future__ import annotations

import os

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read(pid: int) -> dict[int, float]:
    """Thread id -> CPU seconds (user + system) of every thread of process ``pid`` now;
    empty when /proc cannot tell."""
    out: dict[int, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii",
                      errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue                       # a thread that ended meanwhile
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


def split(before: dict[int, float], after: dict[int, float], wall_s: float,
          n: int) -> tuple[float, float]:
    """(the ``n`` busiest threads' CPU time between the two readings as a share of ``n`` x
    ``wall_s``, every other thread's CPU seconds). A thread born in between counts from 0."""
    used = sorted((t - before.get(tid, 0.0) for tid, t in after.items()), reverse=True)
    if not used or wall_s <= 0 or n <= 0:
        return 0.0, 0.0
    return sum(used[:n]) / (n * wall_s), sum(used[n:])
