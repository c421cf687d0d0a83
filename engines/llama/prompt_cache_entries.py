"""The prompt cache's entries (`prompt_cache`): what one cached prefix holds, which entry goes
first when a tier is over its bounds (`eviction_order`: pure), and the counts reported per
model."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1 << 20


@dataclass(eq=False)
class Entry:
    identity: str
    model: str                       # the model id it was made under (reports, mismatch)
    partition: str
    tokens: list[int]
    size: int                        # bytes of its state and checkpoints
    session: str | None = None
    state: bytearray | None = None   # the RAM tier's copy (None: on disk only)
    checkpoints: list[tuple[int, bytes]] = field(default_factory=list)
    path: Path | None = None         # the disk tier's copy, once written
    created: float = 0.0
    last_used: float = 0.0
    hits: int = 0
    spill: bool = False              # drop the RAM copy once written
    fetched: bool = False            # its RAM copy was read from disk for a request (`fetch`)


def score(entry: Entry, now: float) -> float:
    """What keeping ``entry`` is worth: more for each hit, less with the time since it was
    last used (halved after five minutes) and with its size (halved at 64 MiB)."""
    age = max(0.0, now - entry.last_used)
    return (1 + entry.hits) / (1 + age / 300) / (1 + entry.size / (64 * MIB))


def eviction_order(entries: Iterable[Entry], now: float) -> list[Entry]:
    """The entries, the first to go first (lowest `score`). Pure."""
    return sorted(entries, key=lambda e: score(e, now))


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix, by halving slice comparisons (each one in
    C): about 2n element comparisons, not n Python steps."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n                  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class Counts:
    lookups: int = 0
    hits_ram: int = 0
    hits_disk: int = 0
    misses: int = 0
    tokens_ram: int = 0
    tokens_disk: int = 0
    stored: int = 0
    dropped_corrupt: int = 0


def model_row(c: Counts) -> dict:
    return {"lookups": c.lookups, "misses": c.misses, "stored": c.stored,
            "dropped_corrupt": c.dropped_corrupt,
            "ram": {"entries": 0, "bytes": 0, "hits": c.hits_ram, "tokens": c.tokens_ram},
            "disk": {"entries": 0, "bytes": 0, "hits": c.hits_disk, "tokens": c.tokens_disk}}
