"""Stored responses of /v1/responses (``store`` true, the default): what GET and DELETE
/v1/responses/{id} read and what ``previous_response_id`` continues. Owned by the app
(``app.ctx.responses``), kept in SQLite (``responses.db`` in the server's state folder), so
they survive a restart.

A chain stores each turn once: a row holds its own turn (the new input as chat messages, then
its answer), the id of the response it continues (``parent``) and of the conversation it
belongs to (the chain's first response id). `ResponseStore.conversation` rebuilds everything
before a turn by walking the parents (one recursive query, at most ``MAX_DEPTH`` turns).

Bounds (the config's ``server.stored_responses_*``): past the count or the bytes, the least
recently continued conversation loses its oldest turns first; a conversation is dropped whole
``ttl_secs`` after its newest turn. A turn whose ancestor was dropped or deleted can still be
read, but continuing it is refused naming the missing ancestor (`MissingTurn`).

Durability: WAL with ``synchronous=NORMAL``: a commit is one append to the WAL without an
fsync, so writes on the event loop stay short; a killed process loses nothing it committed and
never corrupts the file; a power cut may lose the last commits (never the file). One connection
(this store's) writes; a lock serialises it, so any thread may call. The connection opens on
first use and `close` shuts it (the app's stop); a later call opens it again.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypnos.engines.protocols import KVChatEngine
from hypnos.service import errors
from hypnos.service.wire.sessions import owned_session

log = logging.getLogger("hypnos.responses")

MAX_COUNT = 1000                 # the defaults of the config keys
MAX_BYTES = 64 * 1024**2
TTL_SECS = 30 * 86400
LISTED = 20                      # the newest stored responses the memory status lists
MAX_DEPTH = 10_000               # turns a chain walk follows at most
SESSION_PREFIX = "responses:"
DB_NAME = "responses.db"
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    parent TEXT,
    conversation TEXT NOT NULL,
    model TEXT NOT NULL,
    depth INTEGER NOT NULL,
    created_at REAL NOT NULL,
    bytes INTEGER NOT NULL,
    turn TEXT NOT NULL,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS responses_by_conversation ON responses (conversation);
CREATE TABLE IF NOT EXISTS conversations (
    conversation TEXT PRIMARY KEY,
    used_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS conversations_by_use ON conversations (used_at);
"""
COLUMNS = ("id, owner, parent, conversation, model, depth, created_at, bytes, turn, response, "
           "input_items")


@dataclass
class StoredResponse:
    id: str
    owner: str                         # `keys.key_owner` of the key that stored it; "" no keys
    model: str
    conversation: str                  # the chain's first response id
    parent: str | None                 # the response this one continues
    turn: list[dict]                   # this turn's chat messages: its new input, its answer
    response: dict                     # the Response object GET answers
    # The request's own input as item objects (what GET .../input_items lists).
    input_items: list[dict] = field(default_factory=list)
    depth: int = 0                     # turns before it in its chain
    created_at: float = 0.0            # set by `ResponseStore.put`

    @property
    def bytes(self) -> int:
        """What the row costs against the byte bound: its JSON."""
        return sum(len(_dump(v)) for v in (self.turn, self.response, self.input_items))


class MissingTurn(LookupError):
    """A chain's ancestor is no longer stored (deleted, expired or evicted)."""

    def __init__(self, response_id: str, missing: str):
        super().__init__(missing)
        self.response_id, self.missing = response_id, missing


def _dump(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _row(r: tuple) -> StoredResponse:
    rid, owner, parent, conversation, model, depth, created, _bytes, turn, response, items = r
    return StoredResponse(rid, owner, model, conversation, parent, json.loads(turn),
                          json.loads(response), json.loads(items), depth, created)


class ResponseStore:
    """Stored responses by id. ``path`` None keeps them in an in-memory database (lost at
    exit). ``clock`` is the wall clock (seconds), replaceable in tests. Every method takes the
    store's lock and does one short transaction."""

    def __init__(self, path: Path | None, max_count: int = MAX_COUNT,
                 max_bytes: int = MAX_BYTES, ttl_secs: int = TTL_SECS,
                 clock: Callable[[], float] = time.time):
        self.path = path
        self.max_count, self.max_bytes, self.ttl_secs = max_count, max_bytes, ttl_secs
        self.clock = clock
        self.evicted = 0
        self.durable = path is not None         # False once opening the file failed
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    # ------------------------------------------------------------------ connection

    def _conn(self) -> sqlite3.Connection:
        """The open connection. A database that cannot be opened (an unwritable folder, a
        damaged or newer file) is logged and replaced by one in memory: the server keeps
        answering, without durability (``durable`` False in the snapshot)."""
        if self._db is None:
            try:
                self._db = _open(self.path)
            except (sqlite3.Error, OSError, RuntimeError) as exc:
                log.error("cannot open the stored responses at %s (%s); keeping them in "
                          "memory until the server stops", self.path, exc)
                self._db, self.durable = _open(None), False
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _alive_after(self) -> float:
        """Conversations used before this are expired (ttl 0: none)."""
        return self.clock() - self.ttl_secs if self.ttl_secs else float("-inf")

    # ------------------------------------------------------------------ rows

    def put(self, item: StoredResponse) -> str | None:
        """Keep ``item`` (its ``created_at`` set now): None when kept, else why not (it alone
        exceeds a bound, or the database failed: logged). Drops expired conversations, then
        the oldest turns past the bounds."""
        blobs = [_dump(v) for v in (item.turn, item.response, item.input_items)]
        size = sum(len(b) for b in blobs)        # = item.bytes, serialised once
        if self.max_count == 0:
            return "the server keeps no stored responses (stored_responses_max_count is 0)"
        if size > self.max_bytes:
            return (f"the response takes {size} bytes, more than the server keeps "
                    f"(stored_responses_max_bytes {self.max_bytes})")
        item.created_at = now = self.clock()
        try:
            with self._lock:
                self._insert(item, [b.decode() for b in blobs], size, now)
        except (sqlite3.Error, OSError) as exc:
            log.error("could not store response %s in %s: %s", item.id, self.path, exc)
            return f"the server could not write its response store ({type(exc).__name__})"
        return None

    def _insert(self, item: StoredResponse, texts: list[str], size: int, now: float) -> None:
        """One transaction: the row (``texts``: its turn, response and input items as JSON),
        its conversation's use, then expiry and eviction."""
        db = self._conn()
        with db:
            db.execute(f"INSERT OR REPLACE INTO responses ({COLUMNS}) "
                       "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       (item.id, item.owner, item.parent, item.conversation, item.model,
                        item.depth, now, size, *texts))
            db.execute("INSERT INTO conversations VALUES (?, ?) ON CONFLICT(conversation) "
                       "DO UPDATE SET used_at = excluded.used_at", (item.conversation, now))
            self._expire(db)
            self._evict(db)

    def _expire(self, db: sqlite3.Connection) -> None:
        if not self.ttl_secs:
            return
        before = self._alive_after()
        gone = db.execute("DELETE FROM responses WHERE conversation IN (SELECT conversation "
                          "FROM conversations WHERE used_at < ?)", (before,)).rowcount
        db.execute("DELETE FROM conversations WHERE used_at < ?", (before,))
        self.evicted += max(gone, 0)

    def _evict(self, db: sqlite3.Connection) -> None:
        count, used = db.execute("SELECT COUNT(*), COALESCE(SUM(bytes), 0) "
                                 "FROM responses").fetchone()
        if count <= self.max_count and used <= self.max_bytes:
            return
        victims = []
        oldest = db.execute("SELECT r.id, r.bytes FROM responses r LEFT JOIN conversations c "
                            "ON c.conversation = r.conversation ORDER BY c.used_at, r.rowid")
        for rid, size in oldest:
            if count <= self.max_count and used <= self.max_bytes:
                break
            victims.append((rid,))
            count, used = count - 1, used - size
        oldest.close()
        db.executemany("DELETE FROM responses WHERE id = ?", victims)
        db.execute("DELETE FROM conversations WHERE conversation NOT IN "
                   "(SELECT conversation FROM responses)")
        self.evicted += len(victims)

    def get(self, response_id: str) -> StoredResponse | None:
        """The stored response, None when unknown or expired."""
        with self._lock:
            row = self._conn().execute(
                f"SELECT {', '.join('r.' + c for c in COLUMNS.split(', '))} FROM responses r "
                "JOIN conversations c ON c.conversation = r.conversation "
                "WHERE r.id = ? AND c.used_at >= ?",
                (response_id, self._alive_after())).fetchone()
        return _row(row) if row is not None else None

    def visible(self, response_id: str, owns: Callable[[str], bool]) -> StoredResponse | None:
        """The stored response if ``owns(its owner)`` (the request's key may see it); None
        otherwise, exactly as for an id never stored."""
        item = self.get(response_id)
        return item if item is not None and owns(item.owner) else None

    def delete(self, response_id: str) -> bool:
        """Drop one stored response (its descendants stay, but can no longer be continued)."""
        with self._lock:
            db = self._conn()
            with db:
                gone = db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount
                db.execute("DELETE FROM conversations WHERE conversation NOT IN "
                           "(SELECT conversation FROM responses)")
        return gone > 0

    def conversation(self, item: StoredResponse) -> list[dict]:
        """The chat messages of ``item``'s chain through ``item``, oldest first. Raises
        `MissingTurn` when an ancestor is no longer stored (or the chain is deeper than
        ``MAX_DEPTH``)."""
        with self._lock:
            rows = self._conn().execute(
                "WITH RECURSIVE chain(id, parent, turn, n) AS ("
                " SELECT id, parent, turn, 0 FROM responses WHERE id = ?"
                " UNION ALL SELECT r.id, r.parent, r.turn, chain.n + 1 FROM responses r"
                " JOIN chain ON r.id = chain.parent WHERE chain.n < ?)"
                " SELECT id, parent, turn FROM chain ORDER BY n DESC",
                (item.id, MAX_DEPTH - 1)).fetchall()
        if not rows:
            raise MissingTurn(item.id, item.id)
        oldest_parent = rows[0][1]
        if oldest_parent is not None:
            raise MissingTurn(item.id, oldest_parent)
        return [m for _id, _parent, turn in rows for m in json.loads(turn)]

    def recency(self) -> dict[tuple[str, str], int]:
        """(owner, conversation) -> rank of its newest stored turn (higher: newer)."""
        with self._lock:
            rows = self._conn().execute(
                "SELECT owner, conversation FROM responses GROUP BY owner, conversation "
                "ORDER BY MAX(rowid)").fetchall()
        return {(owner, conv): rank for rank, (owner, conv) in enumerate(rows)}

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def snapshot(self, owner: str | None = None) -> dict:
        """The memory status section: the bounds, the totals and the newest responses (at
        most ``LISTED``, newest first). ``owner`` given: that owner's rows only, and nothing
        about the others (no path, no evictions)."""
        where, args = ("WHERE owner = ?", (owner,)) if owner is not None else ("", ())
        with self._lock:
            db = self._conn()
            count, used, convs = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(bytes), 0), COUNT(DISTINCT conversation) "
                f"FROM responses {where}", args).fetchone()
            newest = db.execute(
                "SELECT id, model, conversation, bytes, created_at FROM responses "
                f"{where} ORDER BY rowid DESC LIMIT ?", (*args, LISTED)).fetchall()
        out = {"count": count, "max_count": self.max_count, "used_bytes": used,
               "max_bytes": self.max_bytes, "ttl_secs": self.ttl_secs,
               "conversations": convs,
               "newest": [{"id": i, "model": m, "conversation": c, "bytes": b,
                           "stored_at": t} for i, m, c, b, t in newest]}
        if owner is None:
            out["evicted"] = self.evicted
            out["path"] = str(self.path) if self.path is not None else None
            out["durable"] = self.durable
        return out


def _open(path: Path | None) -> sqlite3.Connection:
    """The database at ``path`` (made private to the user: folder 0700, file 0600) in WAL
    mode with the schema; in memory when ``path`` is None. A write opens BEGIN IMMEDIATE
    (``isolation_level``) and ``with db`` commits it."""
    if path is None:
        db = sqlite3.connect(":memory:", isolation_level="IMMEDIATE", check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        db = sqlite3.connect(str(path), isolation_level="IMMEDIATE", check_same_thread=False,
                             timeout=5.0)
    try:
        if path is not None:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"stored responses of a newer Hypnos (schema {version})")
        db.executescript(SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION};")
    except BaseException:
        db.close()
        raise
    return db


def session_plan(bound: dict[str, int], slots: int, key: str,
                 recency: dict[str, int]) -> tuple[bool, list[str]]:
    """Whether a stored conversation binds ``key`` on an engine with ``slots`` slots whose
    bound sessions are ``bound``, and which of the conversations' own keys to release first.
    Pure. A conversation never takes the last unbound slot (plain requests and explicit
    sessions keep one), so it never makes a request fail for capacity: it releases the
    conversations' least recent keys (those no longer stored first) to keep one free, and
    binds nothing when it cannot (`bind_conversation` then tags it softly: the prompt cache
    keeps its prefix under its key).
    ``recency``: every stored conversation's session key -> its rank (higher: newer); a bound
    key is a conversation's when it is there or is named like one (`is_conversation_key`)."""
    if key in bound:
        return True, []
    need = 2 - (slots - len(bound))            # releases that leave one unbound after binding
    if need <= 0:
        return True, []
    ours = sorted((k for k in bound if k != key and (k in recency or is_conversation_key(k))),
                  key=lambda k: recency.get(k, -1))
    if len(ours) < need:
        return False, []
    return True, ours[:need]


def is_conversation_key(key: str) -> bool:
    """Whether an engine session key is a stored conversation's: ``responses:<id>``, under
    an owner's namespace or not (`wire.sessions.owned_session`)."""
    return key.startswith(SESSION_PREFIX) or key.partition(":")[2].startswith(SESSION_PREFIX)


def previous_turn(store: ResponseStore, owns: Callable[[str], bool], response_id: str | None
                  ) -> tuple[StoredResponse | None, list[dict]]:
    """The response ``previous_response_id`` names and the conversation through it (chat
    messages); 404 when it is not this key's to see (``owns`` its owner), or an earlier turn
    is gone."""
    if response_id is None:
        return None, []
    item = store.visible(response_id, owns)
    if item is None:
        raise errors.NotFoundError(f"Previous response with id {response_id!r} not found "
                                   "(never stored, deleted, or dropped from the store)",
                                   param="previous_response_id",
                                   code="previous_response_not_found")
    if item.depth + 1 >= MAX_DEPTH:
        raise errors.InvalidRequest(f"The conversation of {response_id!r} is {MAX_DEPTH} turns "
                                    "long, the most a chain may hold; start a new one",
                                    param="previous_response_id")
    try:
        return item, store.conversation(item)
    except MissingTurn as gone:
        raise errors.NotFoundError(
            f"Previous response {response_id!r} continues {gone.missing!r}, which is no "
            "longer stored (deleted, expired, or dropped past the store's bounds), so its "
            "conversation cannot be rebuilt; start a new one", param="previous_response_id",
            code="previous_response_not_found") from None


async def bind_conversation(store: ResponseStore, engine: KVChatEngine, owner: str,
                            conversation: str) -> tuple[str, bool]:
    """The stored conversation's session key on ``engine`` (a chat engine with sessions), in
    ``owner``'s namespace, and whether `session_plan` binds it to a slot; the plan's
    releases run in a worker thread. Unbound (a one-slot model, every other slot bound), the
    key still tags the conversation's prefix (``ChatRequest.cache_tag``): a soft binding
    that reserves no slot, under which the prompt cache keeps the prefix when other traffic
    takes the slot, and which deleting the stored response drops."""
    key = owned_session(owner, SESSION_PREFIX + conversation)
    recency = {owned_session(who, SESSION_PREFIX + conv): rank
               for (who, conv), rank in store.recency().items()}

    def plan() -> bool:
        bind, release = session_plan(engine.sessions(), engine.max_sessions, key, recency)
        for old in release:
            engine.release_session(old)
        return bind
    return key, await asyncio.to_thread(plan)
