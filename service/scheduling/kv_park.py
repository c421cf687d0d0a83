"""KV parking (spec 14): chat slots' KV state kept in host memory while their model is out of
tier 1, bounded by ``max_bytes`` (the least recently parked go first).

The store only keeps and drops states; the scheduler asks the engine to park before an unload
and to restore after a load. A state that does not fit the new layout is dropped by the
engine's restore, so parking never changes an answer.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class _Parked:
    state: object            # the engine's ParkedKV (has .bytes, .slots, .tokens)
    parked_at: float


class KvParkStore:
    def __init__(self, enabled: bool, max_bytes: int):
        self.enabled = enabled
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, _Parked] = OrderedDict()

    @property
    def used_bytes(self) -> int:
        return sum(p.state.bytes for p in self._items.values())

    def configure(self, enabled: bool | None, max_bytes: int | None) -> None:
        if enabled is not None:
            self.enabled = enabled
        if max_bytes is not None:
            self.max_bytes = max_bytes
        if not self.enabled:
            self._items.clear()
        self._trim()

    def put(self, model_id: str, state) -> bool:
        """Keep ``state``; False (nothing kept) when parking is off or it alone exceeds the
        cap."""
        self._items.pop(model_id, None)
        if not self.enabled or state is None or state.bytes > self.max_bytes:
            return False
        self._items[model_id] = _Parked(state, time.monotonic())
        self._trim()
        return model_id in self._items

    def take(self, model_id: str):
        """Remove and return the parked state of ``model_id`` (None when there is none)."""
        item = self._items.pop(model_id, None)
        return item.state if item is not None else None

    def drop(self, model_id: str) -> None:
        self._items.pop(model_id, None)

    def _trim(self) -> None:
        while self._items and self.used_bytes > self.max_bytes:
            self._items.popitem(last=False)      # the least recently parked

    def snapshot(self) -> dict:
        now = time.monotonic()
        return {"enabled": self.enabled, "max_bytes": self.max_bytes,
                "used_bytes": self.used_bytes,
                "models": [{"model": mid, "slots": getattr(p.state, "slots", 0),
                            "tokens": getattr(p.state, "tokens", 0), "bytes": p.state.bytes,
                            "parked_secs_ago": round(now - p.parked_at, 1)}
                           for mid, p in self._items.items()]}
