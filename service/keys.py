"""API keys and per-key limits (spec section 2).

`KeyRing` matches a bearer token against the configured keys in constant time. `Limiter`
admits a request for a key (requests_per_minute, max_concurrent, tokens_per_day) and hands
out a `Permit` that the HTTP layer releases once the last byte of the response went out.
`QuotaBook` holds the tokens each key used today (UTC) and keeps them in a small JSON file
next to the config, so a restart is not a way around tokens_per_day.

Keys never leave this module: everything else sees the key's label (from the config, or
``key-<8 hex>`` of the key's SHA-256 for unlabelled keys).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

from hypnos.service import errors
from hypnos.service.config.atomic import write_atomic
from hypnos.service.config.schema import ServerConfig

log = logging.getLogger("hypnos.keys")
WINDOW_SECS = 60.0


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def key_label(key: str) -> str:
    """The name an unlabelled key is shown by: not reversible, stable across restarts."""
    return "key-" + _digest(key).hex()[:8]


def key_owner(key: str) -> str:
    """The stable, non-secret id that owns what a key stores (responses, sessions, log
    records, cached prefixes): 16 hex of the key's SHA-256 under a fixed domain tag, so it
    matches neither the label nor any digest shown elsewhere."""
    return hashlib.sha256(b"hypnos-owner\0" + key.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class ApiKey:
    label: str
    admin: bool
    digest: bytes = field(repr=False)
    requests_per_minute: int | None = None
    max_concurrent: int | None = None
    tokens_per_day: int | None = None
    # What the key's stored things are recorded under (`key_owner`); "" only for keys made
    # by hand in tests.
    owner: str = ""


class KeyRing:
    """The configured keys: server.api_keys (admin, no limits) and [[server.keys]]."""

    def __init__(self, server: ServerConfig):
        self.keys = [ApiKey(key_label(k), True, _digest(k), owner=key_owner(k))
                     for k in server.api_keys]
        self.keys += [ApiKey(k.label or key_label(k.key), k.admin, _digest(k.key),
                             k.requests_per_minute, k.max_concurrent, k.tokens_per_day,
                             owner=key_owner(k.key))
                      for k in server.keys]

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def match(self, token: str) -> ApiKey | None:
        """The key ``token`` is, or None. Every key is compared (no early exit), each in
        constant time, so the answer's timing says nothing about how close a guess was."""
        probe = _digest(token)
        found = None
        for key in self.keys:
            if hmac.compare_digest(key.digest, probe):
                found = key
        return found


def utc_day(now: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if now is None else now,
                                     dt.UTC).date().isoformat()


def secs_to_utc_midnight(now: float | None = None) -> int:
    now = time.time() if now is None else now
    return max(1, math.ceil(86400 - now % 86400))


def state_path(config_path: Path) -> Path:
    """``hypnos.toml`` -> ``hypnos.state.json`` beside it."""
    return config_path.with_name(config_path.stem + ".state.json")


class QuotaBook:
    """Tokens used per key label on the current UTC day. ``path`` None keeps them in memory
    only (a server with no config file). Thread-safe; writes block for one small fsync."""

    def __init__(self, path: Path | None, wall: Callable[[], float] = time.time):
        self.path = path
        self.wall = wall
        self._lock = threading.Lock()
        self.day = utc_day(wall())
        self.tokens: dict[str, int] = {}
        if path is not None and path.exists():
            self._read(path)

    def _read(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text())
            if data.get("day") == self.day:
                self.tokens = {str(k): int(v) for k, v in data.get("tokens", {}).items()}
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            log.warning("ignoring unreadable quota state %s: %s", path, exc)

    def _roll(self) -> None:
        today = utc_day(self.wall())
        if today != self.day:
            self.day, self.tokens = today, {}

    def used(self, label: str) -> int:
        with self._lock:
            self._roll()
            return self.tokens.get(label, 0)

    def charge(self, label: str, tokens: int) -> None:
        if tokens <= 0:
            return
        with self._lock:
            self._roll()
            self.tokens[label] = self.tokens.get(label, 0) + tokens
            if self.path is None:
                return
            text = json.dumps({"day": self.day, "tokens": self.tokens}, sort_keys=True)
            try:
                # Under the lock, so a later snapshot can never be overwritten by an older one.
                write_atomic(self.path, text)
            except OSError as exc:
                log.warning("could not write quota state %s: %s", self.path, exc)


@dataclass(frozen=True)
class Standing:
    """One limit of a key as it stands now (OpenAI's realtime ``rate_limits`` entry)."""
    name: str                   # requests | tokens
    limit: int
    remaining: int
    reset_seconds: float        # until ``remaining`` is back to ``limit``


@dataclass
class Permit:
    """One admitted request of ``key``; released exactly once."""
    key: ApiKey
    released: bool = False


class Limiter:
    def __init__(self, quotas: QuotaBook, clock: Callable[[], float] = time.monotonic,
                 metrics=None):
        self.quotas = quotas
        self.clock = clock
        self.metrics = metrics
        self._recent: dict[str, deque[float]] = {}
        self._in_flight: dict[str, int] = {}

    def admit(self, key: ApiKey) -> Permit:
        """A permit, or 429 rate_limit_error with Retry-After and the code of the limit."""
        try:
            self._check(key)
        except errors.RateLimited:
            if self.metrics is not None:
                self.metrics.key_rejections.labels(key.label).inc()
            raise
        self._in_flight[key.label] = self._in_flight.get(key.label, 0) + 1
        if key.requests_per_minute is not None:
            self._recent.setdefault(key.label, deque()).append(self.clock())
        if self.metrics is not None:
            self.metrics.key_requests.labels(key.label).inc()
        return Permit(key)

    def _check(self, key: ApiKey) -> None:
        if key.tokens_per_day is not None and self.quotas.used(key.label) >= key.tokens_per_day:
            raise _limited("tokens_per_day",
                           f"The key '{key.label}' used its {key.tokens_per_day} tokens of "
                           "today (UTC)", secs_to_utc_midnight(self.quotas.wall()))
        busy = self._in_flight.get(key.label, 0)
        if key.max_concurrent is not None and busy >= key.max_concurrent:
            raise _limited("max_concurrent",
                           f"The key '{key.label}' already has {busy} requests in flight "
                           f"(max_concurrent {key.max_concurrent})", 1)
        if key.requests_per_minute is not None:
            now = self.clock()
            recent = self._recent.setdefault(key.label, deque())
            while recent and recent[0] <= now - WINDOW_SECS:
                recent.popleft()
            if len(recent) >= key.requests_per_minute:
                wait = math.ceil(recent[0] + WINDOW_SECS - now)
                raise _limited("requests_per_minute",
                               f"The key '{key.label}' made {len(recent)} requests in the last "
                               f"minute (requests_per_minute {key.requests_per_minute})",
                               max(1, wait))

    def in_flight(self, label: str) -> int:
        return self._in_flight.get(label, 0)

    def standing(self, key: ApiKey, unbilled_tokens: int = 0) -> list[Standing]:
        """Where ``key`` stands against its requests_per_minute and tokens_per_day (the
        limits that count something; max_concurrent is a bound, not a budget): [] for a
        key with neither. ``unbilled_tokens``: tokens used but not charged yet (a realtime
        session's, charged when it ends). Requests reset once every request of the last
        minute left the window; tokens at UTC midnight."""
        out = []
        if key.requests_per_minute is not None:
            now = self.clock()
            recent = self._recent.setdefault(key.label, deque())
            while recent and recent[0] <= now - WINDOW_SECS:
                recent.popleft()
            reset = recent[-1] + WINDOW_SECS - now if recent else 0.0
            out.append(Standing("requests", key.requests_per_minute,
                                max(0, key.requests_per_minute - len(recent)), round(reset, 3)))
        if key.tokens_per_day is not None:
            used = self.quotas.used(key.label) + max(0, unbilled_tokens)
            out.append(Standing("tokens", key.tokens_per_day, max(0, key.tokens_per_day - used),
                                float(secs_to_utc_midnight(self.quotas.wall()))))
        return out

    def release(self, permit: Permit, tokens: int = 0) -> None:
        """The response's last byte went out: free the concurrency slot, charge ``tokens``."""
        if permit.released:
            return
        permit.released = True
        label = permit.key.label
        self._in_flight[label] = self._in_flight.get(label, 1) - 1
        if tokens > 0:
            self.quotas.charge(label, tokens)
            if self.metrics is not None:
                self.metrics.key_tokens.labels(label).inc(tokens)


def _limited(code: str, message: str, retry_after: int) -> errors.RateLimited:
    return errors.RateLimited(f"{message}; retry in {retry_after} s", code=code,
                              headers={"Retry-After": str(retry_after)})

