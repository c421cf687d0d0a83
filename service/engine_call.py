"""Running a blocking engine call from a route."""
from __future__ import annotations

import asyncio
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


async def run_engine(call: Callable[..., T], *args, cancel: threading.Event) -> T:
    """Run ``call(*args, cancel)`` in a worker thread. When the awaiting request is cancelled
    (the client hung up) the ``cancel`` flag is set and this waits for the engine to stop at
    its next token, chunk, phrase or batch before re-raising, so the lease ends only once the
    engine is idle again."""
    task = asyncio.ensure_future(asyncio.to_thread(call, *args, cancel))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        cancel.set()
        await asyncio.wait({task})
        raise
