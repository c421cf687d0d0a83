"""`Turns`: one holder per key at a time (one /api/pull per model id); a second caller
waits for the first to end, then takes its turn.

Event-loop thread only. A lock lives only while someone holds or awaits it, so keys that
come and go leave nothing behind.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Turns:
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: Counter[str] = Counter()     # holders and waiters per key

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s turn for the block; blocks (awaits) while another holds it. A
        waiter cancelled while waiting gives its place up."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._locks[key]

