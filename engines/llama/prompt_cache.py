"""The prompt cache beyond the slots: prefixes a slot lost to another conversation, kept in
host RAM (tier 2) and in a folder (tier 3), keyed by partition (the API key owner), model
identity (`prompt_cache_file.cache_identity`) and the tokens.

One ``PromptCache`` serves every model of a server. An engine ``attach``-es to it once per
context and gets a `ModelCache` bound to its identity, which its decode thread uses:
``holds`` / ``put`` when a slot is about to be overwritten, ``best`` / ``load`` when a job
starts. Every new entry is written to the folder in the background (write-behind, by the
writer thread, `prompt_cache_writer`), so entries survive an unload and a restart;
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypnos.engines.llama import prompt_cache_file as files
from hypnos.engines.llama.prompt_cache_entries import (Counts, Entry, common_prefix,
                                                       eviction_order, model_row)
from hypnos.engines.llama.prompt_cache_file import CorruptEntry
from hypnos.engines.llama.prompt_cache_writer import WriterMixin

log = logging.getLogger(__name__)

#: A slot's prefix is cached from this many tokens; a restore must beat the slot's own
#: prefix by ``RESTORE_MARGIN`` tokens.
MIN_TOKENS = 256
RESTORE_MARGIN = 32


class PromptCache(WriterMixin):
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
        #: The RAM tier's bytes allowed now besides ``ram_bytes`` (the scheduler's tier-2
        #: budget less the models' bookings); called from any thread, under the lock.
        self.room: Callable[[], int] | None = None

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
        if size == 0 or size > min(self.ram_cap, self._room()) or self._closed:
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
                if n and (n, e.state is not None) > rank:
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
                tier = "disk" if entry.fetched else "ram"
                entry.fetched = False
                if tier == "disk":
                    counts.hits_disk += 1
                else:
                    counts.hits_ram += 1
                return entry.state, entry.checkpoints, tier
        read = self._read(entry)
        if read is None:
            return None
        with self.lock:
            counts.hits_disk += 1
        return read[0], read[1], "disk"

    def fetch(self, identity: str, partition: str, prompt: list[int]) -> None:
        """Read the best entry for ``prompt`` into RAM when it is on disk only, so the
        decode thread does not wait on the file (call from the request's thread before
        queueing it). Blocks on one file read; nothing when the best entry is in RAM."""
        found = self.best(identity, partition, prompt)
        if found is None or found[1] < self.min_tokens:
            return
        entry = found[0]
        with self.lock:
            if entry.state is not None or entry.path is None:
                return
        read = self._read(entry)
        if read is None:
            return
        with self.lock:
            if entry in self.entries and entry.state is None:
                entry.state, entry.checkpoints, entry.fetched = read[0], read[1], True
                self._trim_locked()

    def _read(self, entry: Entry) -> tuple[bytearray, list[tuple[int, bytes]]] | None:
        """The entry's file, checked; None (the entry deleted) when it does not check out."""
        path = entry.path
        if path is None:
            return None
        try:
            header, state, checkpoints = files.read_entry(path)
            if (header.identity, header.partition, header.tokens) != \
                    (entry.identity, entry.partition, entry.tokens):
                raise CorruptEntry("header differs from the index")
        except (CorruptEntry, OSError) as exc:
            log.warning("prompt cache: dropping %s (%s)", path.name, exc)
            with self.lock:
                self.counts.setdefault(entry.model, Counts()).dropped_corrupt += 1
                self._remove_locked(entry)
            return None
        return state, checkpoints

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

    def set_ram_cap(self, ram_bytes: int) -> None:
        """A new cap on the RAM tier (POST /v1/memory/kv-park's ``max_bytes``): entries
        over it spill to disk or go at once."""
        with self.lock:
            self.ram_cap = max(0, ram_bytes)
            self._trim_locked(wait_for_disk=False)

    def model_totals(self) -> dict[str, tuple[int, int, int, float]]:
        """Model id -> (entries, tokens, bytes, when its newest entry was made), either
        tier: what /v1/memory/kv-park lists."""
        with self.lock:
            out: dict[str, tuple[int, int, int, float]] = {}
            for e in self.entries:
                n, tokens, size, newest = out.get(e.model, (0, 0, 0, e.created))
                out[e.model] = (n + 1, tokens + len(e.tokens), size + e.size,
                                max(newest, e.created))
            return out

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
        cap = min(self.ram_cap, self._room())
        if ram_target is not None:
            cap = min(cap, ram_target)
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

    def _room(self) -> int:
        """What ``room`` allows now (the tier-2 budget the models leave); the cap without
        one or when it cannot tell."""
        if self.room is None:
            return self.ram_cap
        try:
            return max(0, self.room())
        except RuntimeError:            # the pool changed while it was read: next time
            return self.ram_cap

    def _spill_locked(self, e: Entry, wait_for_disk: bool) -> None:
        """The RAM copy goes: at once when the file holds it (or there is no folder: the
        entry goes), else once the writer has written it (``wait_for_disk``)."""
        if e.path is not None:
            e.state = None
        elif self.folder is not None and wait_for_disk and not self._closed:
            e.spill = True
        else:
            self._remove_locked(e)

    # ------------------------------------------------------------------ reports

    def snapshot(self, entries: bool = False) -> dict:
        """Totals per model and tier; ``entries``: each entry too (partition and session
        included: for the admin only)."""
        with self.lock:
            models: dict[str, dict] = {}
            for model, c in self.counts.items():
                models[model] = model_row(c)
            for e in self.entries:
                row = models.setdefault(e.model, model_row(Counts()))
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

    def fetch(self, partition: str, prompt: list[int]) -> None:
        self.cache.fetch(self.identity, partition, prompt)

    def count(self, tier: str, tokens: int = 0) -> None:
        self.cache.count(self.model, tier, tokens)

    def drop_session(self, session: str) -> int:
        return self.cache.drop_session(session)
