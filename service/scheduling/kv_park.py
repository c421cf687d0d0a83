"""KV parking (spec 14): chat slots' KV state kept while their model is out of tier 1, and
put back into the same slots by the next load.

Two stores answer the scheduler the same way (``put`` after the engine parked, ``take``
before it restores, ``snapshot`` for /v1/memory/kv-park): `CacheParking` when the server has
a prompt cache (``hardware.prompt_cache``, the default): parking is a use of the cache, whose
entries it lists; `KvParkStore` without one: the parked states themselves in host memory,
bounded by ``max_bytes`` (the least recently parked go first).

The stores only keep and drop what the engine parked; a state that does not fit the new
layout is dropped by the engine's restore, so parking never changes an answer.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from hypnos.engines.llama.prompt_cache import PromptCache
from hypnos.engines.llama.state import ParkedKV


@dataclass
class _Parked:
    state: object            # the engine's ParkedKV (has .bytes, .slots, .tokens)
    parked_at: float


class _Handles:
    """What both stores do alike: the parked handles by model, most recently parked last."""

    _items: OrderedDict[str, _Parked]

    def _trim(self) -> None:
        raise NotImplementedError

    def _keep(self, model_id: str, state, admitted: bool) -> bool:
        """Replace ``model_id``'s handle with ``state`` when ``admitted`` (else drop it);
        whether it is still kept after the store trimmed itself to its cap."""
        self._items.pop(model_id, None)
        if not admitted:
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


class KvParkStore(_Handles):
    def __init__(self, enabled: bool, max_bytes: int):
        self.enabled = enabled
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, _Parked] = OrderedDict()

    @property
    def used_bytes(self) -> int:
        return sum(p.state.bytes for p in self._items.values())

    @property
    def booked_bytes(self) -> int:
        """Host memory the parked states take beside every booking (the process's)."""
        return self.used_bytes

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
        return self._keep(model_id, state, self.enabled and state is not None
                          and state.bytes <= self.max_bytes)

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


class CacheParking(_Handles):
    """KV parking as a use of the prompt cache. An engine with the cache parks its slots in
    it (`ParkedKV.cached` names them; only a slot the cache refused is copied, in
    ``entries``); this keeps those handles until the model's next load restores them.

    The kv-park routes read and change the cache:

    - ``enabled``: whether an unload parks (hardware.kv_park); off, an unload leaves the
      cache only the prefixes it keeps anyway (from its minimum length up) and a load puts
      nothing back into the slots (requests still find their prefixes by lookup). Turning
      it off forgets the pending restores; the cache's entries stay.
    - ``max_bytes``: the cache's RAM tier (hardware.prompt_cache_ram_bytes); a lower value
      spills entries to disk (or drops them without a disk tier).
    - ``used_bytes``: the RAM tier's bytes plus the copies of slots the cache refused.
    - ``models``: per model, the cache's entries (either tier) and its refused copies:
      ``slots`` entries, their ``tokens`` and ``bytes``, ``parked_secs_ago`` since the
      newest one was made.

    Runs on the event loop; the cache locks itself."""

    def __init__(self, enabled: bool, cache: PromptCache):
        self.enabled = enabled
        self.cache = cache
        self._items: OrderedDict[str, _Parked] = OrderedDict()

    @property
    def max_bytes(self) -> int:
        return self.cache.ram_cap

    @property
    def used_bytes(self) -> int:
        return self.cache.ram_used + self.booked_bytes

    @property
    def booked_bytes(self) -> int:
        """The copies only: the cache's RAM tier is booked in tier 2 already."""
        return sum(_copied(p.state)[2] for p in self._items.values())

    def configure(self, enabled: bool | None, max_bytes: int | None) -> None:
        if enabled is not None:
            self.enabled = enabled
        if max_bytes is not None:
            self.cache.set_ram_cap(max_bytes)
        if not self.enabled:
            self._items.clear()
        self._trim()

    def put(self, model_id: str, state) -> bool:
        """Keep the engine's handle ``state`` for the next load; False (nothing kept) when
        parking is off, nothing was parked, or its copies alone exceed the cap."""
        return self._keep(model_id, state, self.enabled and state is not None
                          and bool(state.slots) and _copied(state)[2] <= self.max_bytes)

    def _trim(self) -> None:
        """The least recently parked copies go while the RAM tier and the copies exceed the
        cap (a handle whose slots are all in the cache costs nothing and stays)."""
        for model_id in [m for m, p in self._items.items() if _copied(p.state)[2]]:
            if self.used_bytes <= self.max_bytes:
                break
            del self._items[model_id]

    def snapshot(self) -> dict:
        now, wall = time.monotonic(), self.cache.clock()
        rows = {m: [n, tokens, size, round(wall - newest, 1)]
                for m, (n, tokens, size, newest) in self.cache.model_totals().items()}
        for m, p in self._items.items():
            slots, tokens, size = _copied(p.state)
            if slots:
                row = rows.setdefault(m, [0, 0, 0, round(now - p.parked_at, 1)])
                row[0], row[1], row[2] = row[0] + slots, row[1] + tokens, row[2] + size
                row[3] = min(row[3], round(now - p.parked_at, 1))
        return {"enabled": self.enabled, "max_bytes": self.max_bytes,
                "used_bytes": self.used_bytes,
                "models": [{"model": m, "slots": n, "tokens": t, "bytes": b,
                            "parked_secs_ago": ago}
                           for m, (n, t, b, ago) in sorted(rows.items())]}


def _copied(state) -> tuple[int, int, int]:
    """(slots, tokens, bytes) a parked handle holds itself: a `ParkedKV`'s copies (its
    slots in the cache are the cache's), another engine's whole state."""
    if isinstance(state, ParkedKV):
        return len(state.entries), sum(len(e.tokens) for e in state.entries), state.bytes
    return state.slots, state.tokens, state.bytes


#: What the scheduler parks with.
Parking = KvParkStore | CacheParking
