"""Stored responses of /v1/responses (``store`` true, the default): what GET and DELETE
/v1/responses/{id} read and what ``previous_response_id`` continues. Owned by the app
(``app.ctx.responses``), in memory, bounded by count and bytes (the config's
``server.stored_responses_max_count`` and ``server.stored_responses_max_bytes``): past either
bound the oldest stored responses go first. Lost on restart.

A stored response keeps its conversation as chat messages (``messages``: everything before
it plus its own answer, without the instructions) and the id of the conversation it belongs
to (the first response of the chain): that id is the conversation's session key on the chat
engine (`session_plan`), so its slot keeps the KV the next turn reuses.
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_COUNT = 1000                 # the defaults of the two config keys
MAX_BYTES = 64 * 1024**2
LISTED = 20                      # the newest stored responses the memory status lists
SESSION_PREFIX = "responses:"


@dataclass
class StoredResponse:
    id: str
    model: str
    conversation: str                  # the chain's first response id
    messages: list[dict]               # the conversation after this response (chat messages)
    response: dict                     # the Response object GET answers
    # The request's own input as item objects (what GET .../input_items lists).
    input_items: list[dict] = field(default_factory=list)
    stored_at: float = field(default_factory=time.time)
    bytes: int = 0

    def __post_init__(self) -> None:
        if not self.bytes:
            self.bytes = len(json.dumps([self.messages, self.response, self.input_items]))

    @property
    def session_key(self) -> str:
        return SESSION_PREFIX + self.conversation


class ResponseStore:
    """Responses by id, oldest first. Not thread-safe: the event loop owns it."""

    def __init__(self, max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES):
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def put(self, item: StoredResponse) -> bool:
        """Keep ``item`` (the newest); False when it alone exceeds max_bytes (not kept)."""
        self.delete(item.id)
        if item.bytes > self.max_bytes:
            return False
        self._items[item.id] = item
        self._bytes += item.bytes
        while len(self._items) > self.max_count or self._bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self._bytes -= old.bytes
            self.evicted += 1
        return True

    def get(self, response_id: str) -> StoredResponse | None:
        return self._items.get(response_id)

    def delete(self, response_id: str) -> bool:
        item = self._items.pop(response_id, None)
        if item is None:
            return False
        self._bytes -= item.bytes
        return True

    def recency(self) -> dict[str, int]:
        """Session key -> rank of its conversation's newest stored response (higher: newer)."""
        return {item.session_key: rank for rank, item in enumerate(self._items.values())}

    def snapshot(self) -> dict:
        """The memory status section: the totals, and the newest responses (at most
        ``LISTED``, newest first) with their size."""
        newest = list(self._items.values())[:-LISTED - 1:-1]
        return {"count": len(self._items), "max_count": self.max_count,
                "used_bytes": self._bytes, "max_bytes": self.max_bytes,
                "evicted": self.evicted,
                "conversations": len({i.conversation for i in self._items.values()}),
                "newest": [{"id": i.id, "model": i.model, "conversation": i.conversation,
                            "bytes": i.bytes, "stored_at": i.stored_at} for i in newest]}


def session_plan(bound: dict[str, int], slots: int, key: str,
                 recency: dict[str, int]) -> tuple[bool, list[str]]:
    """Whether a stored conversation binds ``key`` on an engine with ``slots`` slots whose
    bound sessions are ``bound``, and which of the conversations' own keys to release first.
    Pure. A conversation never takes the last unbound slot (plain requests and explicit
    sessions keep one), so it never makes a request fail for capacity: it releases the
    conversations' least recent keys (those no longer stored first) to keep one free, and
    binds nothing when it cannot (the prefix cache still serves it, unprotected)."""
    if key in bound:
        return True, []
    need = 2 - (slots - len(bound))            # releases that leave one unbound after binding
    if need <= 0:
        return True, []
    ours = sorted((k for k in bound if k.startswith(SESSION_PREFIX) and k != key),
                  key=lambda k: recency.get(k, -1))
    if len(ours) < need:
        return False, []
    return True, ours[:need]
