"""One wake-up for everything that waits on the pool: "a lease, a hold or a load ended".

Waiters re-check their own condition after each wake-up (a model no longer in use, a plan
that now fits). Because the event loop runs one task at a time, a waiter that checked its
condition and then calls `wait` cannot miss a `notify` in between.
"""
from __future__ import annotations

import asyncio


class Wakeup:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake every task waiting now (later waiters wait for the next notify)."""
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait for the next `notify`, at most ``timeout`` seconds (None: no limit).
        True when woken, False on timeout."""
        event = self._event
        if timeout is None:
            await event.wait()
            return True
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True
