"""The open Realtime sessions (GET /v1/realtime): the bound on how many may be open at once
(``limits.realtime_max_sessions``) and what /v1/memory/status shows of them. Event loop
only."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field


@dataclass
class SessionInfo:
    model: str
    opened: float = field(default_factory=time.monotonic)
    responses: int = 0
    buffered_ms: float = 0.0
    responding: bool = False
    tokens_in: int = 0          # the responses' prompt and completion tokens, charged to
    tokens_out: int = 0         # the key once the session ends


class RealtimeBook:
    def __init__(self) -> None:
        self.sessions: dict[int, SessionInfo] = {}
        self._ids = itertools.count(1)

    def open(self, model: str, limit: int) -> tuple[int, SessionInfo] | None:
        """A new session's slot, or None when ``limit`` are open already."""
        if len(self.sessions) >= limit:
            return None
        sid = next(self._ids)
        self.sessions[sid] = info = SessionInfo(model)
        return sid, info

    def close(self, sid: int) -> None:
        self.sessions.pop(sid, None)

    def status(self) -> dict:
        now = time.monotonic()
        return {"open": len(self.sessions), "sessions": [
            {"model": s.model, "open_secs": round(now - s.opened, 1), "responses": s.responses,
             "buffered_ms": round(s.buffered_ms), "responding": s.responding}
            for s in self.sessions.values()]}
