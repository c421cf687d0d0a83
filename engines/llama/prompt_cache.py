"""The prompt cache beyond the slots: prefixes a slot lost to another conversation, kept in
host RAM (tier 2) and in a folder (tier 3), keyed by partition (the API key owner), model
identity (`prompt_cache_file.cache_identity`) and the tokens.

One ``PromptCache`` serves every model of a server. An engine ``attach``-es to it once per
context and gets a `ModelCache` bound to its identity, which its decode thread uses:
``holds`` / ``put`` when a slot is about to be overwritten, ``best`` / ``load`` when a job
starts. Every new entry is written to the folder in the background (write-behind, by the
writer thread: never on the decode thread), so entries survive an unload and a restart;
the RAM copy goes when the RAM tier is over its bytes (``ram_bytes``) or unused for
``ram_age_secs``; files go past ``disk_bytes`` or ``max_age_secs``. Which entry goes first
is `eviction_order` (recency, size and hits). A file that does not check out (magic,
version, checksum, identity) is deleted, never loaded.

Thread safety: every method may be called from any thread (one lock inside); ``load`` of an
entry only on disk blocks on one file read.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hypnos.engines.llama import prompt_cache_file as files
from hypnos.engines.llama.prompt_cache_file import CorruptEntry, FileHeader

log = logging.getLogger(__name__)

MIB = 1 << 20
#: A slot's prefix is cached from this many tokens; a restore must beat the slot's own
#: prefix by ``RESTORE_MARGIN`` tokens.
MIN_TOKENS = 256
RESTORE_MARGIN = 32


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


def score(entry: Entry, now: float) -> float:
    """What keeping ``entry`` is worth: more for each hit, less with the time since it was
    last used (halved after five minutes) and with its size (halved at 64 MiB)."""
    age = max(0.0, now - entry.last_used)
    return (1 + entry.hits) / (1 + age / 300) / (1 + entry.size / (64 * MIB))


def eviction_order(entries: Iterable[Entry], now: float) -> list[Entry]:
    """The entries, the first to go first (lowest `score`). Pure."""
    return sorted(entries, key=lambda e: score(e, now))


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


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


class PromptCache:
    """See the module. ``folder`` None: RAM only. ``clock``: wall time (entries' ages are
    kept across restarts)."""

    def __init__(self, ram_bytes: int, disk_bytes: int = 0, folder: Path | None = None,
                 max_age_secs: float = 7 * 86400, ram_age_secs: float = 1800,
                 min_tokens: int = MIN_TOKENS, clock: Callable[[], float] = time.time):
        self.ram_cap, self.disk_cap = max(0, ram_bytes), max(0, disk_bytes)
        self.folder = folder if folder is not None and self.disk_cap > 0 else None
        self.max_age, self.ram_age = max_age_secs, ram_age_secs
        self.min_tokens = min_tokens
        self.clock = clock
        self.lock = threading.RLock()
        self.entries: list[Entry] = []
        self.counts: dict[str, Counts] = {}
        self._scanned = False
        self._writes: queue.Queue[Entry | None] = queue.Queue()
        self._idle = threading.Condition(self.lock)
        self._pending = 0
        self._writer: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ sizes

    @property
    def ram_used(self) -> int:
        with self.lock:
            return sum(e.size for e in self.entries if e.state is not None)

    @property
    def disk_used(self) -> int:
        with self.lock:
            return sum(e.size for e in self.entries if e.path is not None)

    # ------------------------------------------------------------------ models

    def attach(self, model: str, identity: str) -> ModelCache:
        """The cache as the engine of ``model`` with ``identity`` uses it. Rebuilds the index
        from the folder on first use; entries of ``model`` made under another identity
        (other weights, KV types or llama.cpp) are deleted."""
        with self.lock:
            self._scan_locked()
            for e in [e for e in self.entries if e.model == model and e.identity != identity]:
                self._remove_locked(e)
            self.counts.setdefault(model, Counts())
        return ModelCache(self, model, identity)

    def _scan_locked(self) -> None:
        if self._scanned or self.folder is None:
            self._scanned = True
            return
        self._scanned = True
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.folder, 0o700)
            names = sorted(self.folder.iterdir())
        except OSError as exc:
            log.warning("prompt cache folder %s unusable (%s): disk tier off", self.folder, exc)
            self.folder = None
            return
        for path in names:
            if path.suffix == ".tmp":
                path.unlink(missing_ok=True)
                continue
            if path.suffix != files.SUFFIX:
                continue
            try:
                h = files.read_header(path)
                size = path.stat().st_size
            except (CorruptEntry, OSError) as exc:
                log.warning("prompt cache: dropping %s (%s)", path.name, exc)
                path.unlink(missing_ok=True)
                continue
            self.entries.append(Entry(h.identity, h.model, h.partition, h.tokens, size,
                                      h.session, path=path, created=h.created,
                                      last_used=h.last_used))
        self._trim_locked()

    # ------------------------------------------------------------------ entries

    def put(self, model: str, identity: str, partition: str, tokens: list[int],
            state: bytearray, checkpoints: list[tuple[int, bytes]],
            session: str | None) -> Entry | None:
        """Keep a prefix (it is written to the folder in the background). Entries it extends
        are dropped. None when the RAM tier cannot hold it."""
        size = len(state) + sum(len(b) for _, b in checkpoints)
        if size == 0 or size > self.ram_cap or self._closed:
            return None
        now = self.clock()
        with self.lock:
            for e in self._candidates_locked(identity, partition):
                if len(e.tokens) <= len(tokens) and tokens[:len(e.tokens)] == e.tokens:
                    self._remove_locked(e)     # a shorter copy of the same conversation
            entry = Entry(identity, model, partition, list(tokens), size, session, state,
                          list(checkpoints), created=now, last_used=now)
            self.entries.append(entry)
            self.counts.setdefault(model, Counts()).stored += 1
            if self.folder is not None:
                self._pending += 1
                self._writes.put(entry)
                self._start_writer_locked()
            self._trim_locked()
            return entry

    def holds(self, identity: str, partition: str, tokens: list[int]) -> bool:
        """An entry of ``partition`` already holds ``tokens`` (or more after them)."""
        with self.lock:
            return any(len(e.tokens) >= len(tokens) and e.tokens[:len(tokens)] == tokens
                       for e in self._candidates_locked(identity, partition))

    def best(self, identity: str, partition: str, prompt: list[int]) -> tuple[Entry, int] | None:
        """The entry of ``partition`` sharing the longest prefix with ``prompt`` (a RAM copy
        first on a tie), and that prefix's length; None when none shares a token."""
        with self.lock:
            found, rank = None, (0, False)
            for e in self._candidates_locked(identity, partition):
                n = common_prefix(e.tokens, prompt)
                if (n, e.state is not None) > rank:
                    found, rank = (e, n), (n, e.state is not None)
            return found

    def load(self, entry: Entry) -> tuple[bytearray, list[tuple[int, bytes]], str] | None:
        """The entry's state, checkpoints and the tier it came from ("ram" or "disk"), counted
        as a hit; None when it is gone or its file does not check out (then deleted)."""
        with self.lock:
            if entry not in self.entries:
                return None
            entry.last_used = self.clock()
            entry.hits += 1
            counts = self.counts.setdefault(entry.model, Counts())
            if entry.state is not None:
                counts.hits_ram += 1
                return entry.state, entry.checkpoints, "ram"
            path = entry.path
        try:
            header, state, checkpoints = files.read_entry(path)
            if (header.identity, header.partition, header.tokens) != \
                    (entry.identity, entry.partition, entry.tokens):
                raise CorruptEntry("header differs from the index")
        except (CorruptEntry, OSError) as exc:
            log.warning("prompt cache: dropping %s (%s)", path.name, exc)
            with self.lock:
                counts.dropped_corrupt += 1
                self._remove_locked(entry)
            return None
        with self.lock:
            counts.hits_disk += 1
        return state, checkpoints, "disk"

    def count(self, model: str, tier: str, tokens: int) -> None:
        """One lookup of ``model``'s engine: restored from ``tier`` ("ram", "disk"), or a
        "miss" (neither the slot nor the cache held a useful prefix), or "slot"."""
        with self.lock:
            c = self.counts.setdefault(model, Counts())
            c.lookups += 1
            if tier == "miss":
                c.misses += 1
            elif tier == "ram":
                c.tokens_ram += tokens
            elif tier == "disk":
                c.tokens_disk += tokens

    def drop_session(self, session: str) -> int:
        """Remove every entry of the conversation ``session`` (a released session, a deleted
        stored response); how many went."""
        with self.lock:
            gone = [e for e in self.entries if e.session == session]
            for e in gone:
                self._remove_locked(e)
            return len(gone)

    def shrink_ram(self, target: int) -> int:
        """Bring the RAM tier to at most ``target`` bytes (a load needs them): copies on disk
        stay there, the others are dropped. The bytes freed."""
        with self.lock:
            before = self.ram_used
            self._trim_locked(ram_target=max(0, target), wait_for_disk=False)
            return before - self.ram_used

    def _candidates_locked(self, identity: str, partition: str) -> list[Entry]:
        return [e for e in self.entries if e.identity == identity and e.partition == partition]

    def _remove_locked(self, entry: Entry) -> None:
        if entry in self.entries:
            self.entries.remove(entry)
        entry.state = None
        if entry.path is not None:
            entry.path.unlink(missing_ok=True)
            entry.path = None

    def _trim_locked(self, ram_target: int | None = None, wait_for_disk: bool = True) -> None:
        """Apply the bounds: ages, then the RAM tier's bytes (spilling to disk), then the
        disk tier's bytes."""
        now = self.clock()
        for e in list(self.entries):
            if now - e.last_used > self.max_age:
                self._remove_locked(e)
            elif e.state is not None and now - e.last_used > self.ram_age:
                self._spill_locked(e, wait_for_disk)
        cap = self.ram_cap if ram_target is None else min(self.ram_cap, ram_target)
        for e in eviction_order([e for e in self.entries if e.state is not None and not e.spill],
                                now):
            if sum(x.size for x in self.entries if x.state is not None and not x.spill) <= cap:
                break
            self._spill_locked(e, wait_for_disk)
        on_disk = [e for e in self.entries if e.path is not None]
        used = sum(e.size for e in on_disk)
        for e in eviction_order(on_disk, now):
            if used <= self.disk_cap:
                break
            used -= e.size
            e.path.unlink(missing_ok=True)
            e.path = None
            if e.state is None:
                self.entries.remove(e)

    def _spill_locked(self, e: Entry, wait_for_disk: bool) -> None:
        """The RAM copy goes: at once when the file holds it (or there is no folder: the
        entry goes), else once the writer has written it (``wait_for_disk``)."""
        if e.path is not None:
            e.state = None
        elif self.folder is not None and wait_for_disk and not self._closed:
            e.spill = True
        else:
            self._remove_locked(e)

    # ------------------------------------------------------------------ writer thread

    def _start_writer_locked(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="prompt-cache-writer",
                                            daemon=True)
            self._writer.start()

    def _write_loop(self) -> None:
        while True:
            try:
                entry = self._writes.get(timeout=60)
            except queue.Empty:
                with self.lock:
                    self._trim_locked()
                continue
            if entry is None:
                return
            try:
                self._write(entry)
            except OSError as exc:
                log.warning("prompt cache: could not write an entry (%s)", exc)
                with self.lock:
                    if entry.spill:
                        self._remove_locked(entry)
            finally:
                with self.lock:
                    self._pending -= 1
                    self._trim_locked()
                    self._idle.notify_all()

    def _write(self, entry: Entry) -> None:
        with self.lock:
            state = entry.state
            if entry not in self.entries or state is None or self.folder is None:
                return
            path = self.folder / f"{os.urandom(12).hex()}{files.SUFFIX}"
            header = FileHeader(entry.identity, entry.model, entry.partition, entry.session,
                                entry.tokens, entry.created, entry.last_used)
        files.write_file(path, files.encode(header, state, entry.checkpoints))
        with self.lock:
            if entry not in self.entries:      # dropped meanwhile (a released session)
                path.unlink(missing_ok=True)
                return
            entry.path = path
            if entry.spill:
                entry.state, entry.spill = None, False

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every entry put so far is on disk (or failed); False on timeout."""
        end = time.monotonic() + timeout
        with self.lock:
            while self._pending:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def close(self, timeout: float = 10.0) -> None:
        """Finish the writes under way (up to ``timeout``) and stop the writer."""
        self.flush(timeout)
        with self.lock:
            self._closed = True
            writer = self._writer
        if writer is not None:
            self._writes.put(None)
            writer.join(timeout)

    # ------------------------------------------------------------------ reports

    def snapshot(self, entries: bool = False) -> dict:
        """Totals per model and tier; ``entries``: each entry too (partition and session
        included: for the admin only)."""
        with self.lock:
            models: dict[str, dict] = {}
            for model, c in self.counts.items():
                models[model] = _model_row(c)
            for e in self.entries:
                row = models.setdefault(e.model, _model_row(Counts()))
                if e.state is not None:
                    row["ram"]["entries"] += 1
                    row["ram"]["bytes"] += e.size
                if e.path is not None:
                    row["disk"]["entries"] += 1
                    row["disk"]["bytes"] += e.size
            out = {"enabled": True, "ram_max_bytes": self.ram_cap,
                   "disk_max_bytes": self.disk_cap if self.folder is not None else 0,
                   "max_age_secs": self.max_age, "min_tokens": self.min_tokens,
                   "entries": len(self.entries), "ram_bytes": self.ram_used,
                   "disk_bytes": self.disk_used,
                   "models": [{"model": m, **row} for m, row in sorted(models.items())]}
            if entries:
                now = self.clock()
                out["items"] = [{"model": e.model, "partition": e.partition,
                                 "session": e.session, "tokens": len(e.tokens),
                                 "bytes": e.size, "hits": e.hits,
                                 "tiers": [t for t, on in (("ram", e.state is not None),
                                                           ("disk", e.path is not None)) if on],
                                 "idle_secs": round(now - e.last_used, 1)}
                                for e in self.entries]
            return out


def _model_row(c: Counts) -> dict:
    return {"lookups": c.lookups, "misses": c.misses, "stored": c.stored,
            "dropped_corrupt": c.dropped_corrupt,
            "ram": {"entries": 0, "bytes": 0, "hits": c.hits_ram, "tokens": c.tokens_ram},
            "disk": {"entries": 0, "bytes": 0, "hits": c.hits_disk, "tokens": c.tokens_disk}}


@dataclass(frozen=True)
class ModelCache:
    """`PromptCache` bound to one engine's model and identity (what its decode loop uses)."""
    cache: PromptCache
    model: str
    identity: str

    @property
    def min_tokens(self) -> int:
        return self.cache.min_tokens

    def holds(self, partition: str, tokens: list[int]) -> bool:
        return self.cache.holds(self.identity, partition, tokens)

    def put(self, partition: str, tokens: list[int], state: bytearray,
            checkpoints: list[tuple[int, bytes]], session: str | None) -> Entry | None:
        return self.cache.put(self.model, self.identity, partition, tokens, state, checkpoints,
                              session)

    def best(self, partition: str, prompt: list[int]) -> tuple[Entry, int] | None:
        return self.cache.best(self.identity, partition, prompt)

    def load(self, entry: Entry):
        return self.cache.load(entry)

    def count(self, tier: str, tokens: int = 0) -> None:
        self.cache.count(self.model, tier, tokens)

    def drop_session(self, session: str) -> int:
        return self.cache.drop_session(session)
