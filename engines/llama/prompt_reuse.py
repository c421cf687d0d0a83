"""The decode loop's half of the prompt cache (`prompt_cache`): a slot's prefix is kept
before another conversation overwrites it (``_stash``), and a job starts from the longest
cached prefix of its partition when that beats what its slot holds (``_restore_cached``).
KV parking is a use of the same cache: before an unload every slot goes there
(``park_in_cache``) and after the next load back into its own slot (``restore_parked``).

A mixin over ``DecodeLoop`` (``ll``, ``ctx``, ``n_ctx_seq``, ``cache``, ``forget``,
``kv_replaced``); all run on the decode thread (in ``_start``, or through ``call``). A full
state is written into the slot and then trimmed to the common prefix by ``DecodeLoop._trim``,
the one place that knows how much a trim really keeps (on a hybrid model: its checkpoint).
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from hypnos.engines.llama.checkpoints import Checkpoint
from hypnos.engines.llama.parting import parting
from hypnos.engines.llama.prompt_cache_entries import common_prefix
from hypnos.engines.llama.prompt_cache import RESTORE_MARGIN, ModelCache
from hypnos.engines.llama.prompt_cache_entries import Entry
from hypnos.engines.llama.slots import Job, Slot
from hypnos.engines.llama.state import CachedSlot, ParkedKV, ParkedSlot, read_seq, write_seq

log = logging.getLogger(__name__)

#: A slot's prefix is stashed only when the new job drops at least this many of its tokens
#: (a conversation's next turn drops a few template tokens at most: its slot keeps it).
MIN_LOST_TOKENS = 32


class CachedPrefixes:
    """See the module."""

    cache: ModelCache | None
    slots: list[Slot]
    _piece: Callable[..., bytes]

    def _stash(self, slot: Slot, keep: int) -> None:
        """Put the slot's KV state and tokens (and checkpoints) in the cache when the job
        about to start keeps only ``keep`` of its tokens, the slot holds at least the cache's
        minimum, and no entry holds them already; tagged with the session whose
        conversation the KV holds (``Slot.released_key``: the session or tag of the job that
        made it, a session imported into it), so releasing or deleting that conversation
        drops it. The slot then carries the new job's.
        Blocks ~1 ms per MB (one state copy)."""
        cache, tokens = self.cache, slot.tokens
        # The slot serves another job: its KV is that job's conversation's from now on (its
        # bound session, or a soft binding's tag, ``Job.tag``: no slot reserved for it). Not
        # ``slot.key``: a session bound at submit is the new job's, not the old KV's.
        tag, job = slot.released_key, slot.job
        slot.released_key = (job.session_key or job.tag) if job is not None else None
        if cache is None or len(tokens) < cache.min_tokens or \
                len(tokens) - keep < MIN_LOST_TOKENS or tokens[0] == -1 or \
                cache.holds(slot.partition, tokens):
            return
        state = read_seq(self.ll, self.ctx, slot.seq_id)
        checkpoints = [(c.n_tokens, bytes(c.state)) for c in slot.checkpoints]
        cache.put(slot.partition, list(tokens), state, checkpoints, tag)

    def _cache_best(self, job: Job) -> tuple[Entry, int] | None:
        """The prompt cache's entry of ``job``'s partition sharing the longest prefix with
        its prompt, and that length (None without a cache or a match): looked up once per
        job, for the miss report and the restore."""
        if self.cache is None or job.prefill is not None:
            return None
        return self.cache.best(job.partition, job.prompt)

    def _parting(self, job: Job, found: tuple[Entry, int] | None) -> dict | None:
        """Where ``job``'s prompt parts from the best prefix its partition has cached, in a
        slot or in the prompt cache (``found``, `_cache_best`); call before the slot is
        trimmed."""
        if job.prefill is not None:
            return None
        candidates = [s.tokens for s in self.slots if s.partition == job.partition]
        if found is not None:
            candidates.append(found[0].tokens)
        return parting(job.prompt, candidates, self._text_of)

    def _text_of(self, tokens: list[int]) -> str:
        """Tokens as text, special ones as written (a template's markers show)."""
        return b"".join(self._piece(t, special=True) for t in tokens).decode("utf-8", "replace")

    def _kept_below(self, slot: Slot) -> bool:
        """The prompt cache holds the slot's tokens: giving the slot away loses nothing."""
        cache = self.cache
        return (cache is not None and len(slot.tokens) >= cache.min_tokens
                and slot.tokens[0] != -1 and cache.holds(slot.partition, slot.tokens))

    def stash_all(self) -> None:
        """Put every idle slot's prefix in the cache (before the context goes: an unload, a
        demotion, a shutdown), so it survives them. Call on the decode thread
        (``DecodeLoop.call``)."""
        for slot in self.slots:
            if slot.job is None:
                self._stash(slot, 0)

    def park_in_cache(self, parked: ParkedKV) -> None:
        """KV parking as a use of the prompt cache (an unload comes next): every slot holding
        tokens goes to the cache however short (below its minimum too), tagged as ``_stash``
        tags, and ``parked.cached`` names it; a slot the cache cannot take (its RAM tier is
        full) is copied into ``parked.entries`` as parking without a cache does. Call on the
        decode thread while no job runs; blocks ~1 ms per MB of what is not cached yet."""
        cache = self.cache
        for slot in self.slots:
            tokens = list(slot.tokens)
            if not tokens:
                continue
            if cache is not None and tokens[0] != -1 and cache.holds(slot.partition, tokens):
                parked.cached.append(CachedSlot(slot.seq_id, tokens, slot.partition))
                continue
            state = read_seq(self.ll, self.ctx, slot.seq_id)
            checkpoints = [(c.n_tokens, bytes(c.state)) for c in slot.checkpoints]
            if cache is not None and tokens[0] != -1 and cache.put(
                    slot.partition, tokens, state, checkpoints, slot.released_key) is not None:
                parked.cached.append(CachedSlot(slot.seq_id, tokens, slot.partition))
            else:
                parked.entries.append(ParkedSlot(slot.seq_id, tokens, state, slot.partition,
                                                 list(slot.checkpoints)))

    def restore_parked(self, parked: list[CachedSlot]) -> int:
        """Write each slot ``park_in_cache`` parked back into the same sequence from the
        cache (its entry, or a longer one of the same partition holding all its tokens),
        with its checkpoints and its tag; the tokens restored. A slot this context lacks or
        that is busy, an entry gone or too long for a slot, one llama.cpp refuses: left out
        (its conversation finds its prefix by lookup, or prefills). Decode thread."""
        cache, restored = self.cache, 0
        for ref in parked:
            if cache is None or ref.seq_id >= len(self.slots):
                continue
            slot = self.slots[ref.seq_id]
            found = cache.best(ref.partition, ref.tokens)
            if slot.job is not None or found is None or found[1] < len(ref.tokens) or \
                    len(found[0].tokens) >= self.n_ctx_seq:
                continue
            loaded = cache.load(found[0])
            if loaded is None:
                continue
            if not write_seq(self.ll, self.ctx, slot.seq_id, loaded[0]):
                self.forget(slot)
                continue
            slot.tokens[:] = found[0].tokens
            slot.partition = ref.partition
            self.kv_replaced(slot)
            self._restore_checkpoints(slot, loaded[1])
            slot.released_key = found[0].session
            restored += len(slot.tokens)
        return restored

    def _restore_cached(self, slot: Slot, job: Job, own: int,
                        found: tuple[Entry, int] | None) -> tuple[int, str]:
        """Write the longest prefix of ``job``'s partition held elsewhere into the slot when
        it beats the slot's own ``own`` tokens by ``RESTORE_MARGIN``: another slot's KV (one
        bound to another session, or busy with another request of the same prefix, which
        the job could not take) or the prompt cache's best entry. Returns the prompt tokens
        the slot then serves (before the trim) and where they came from: "slot" (its own or
        another slot's), "ram" or "disk". The slot's partition is ``job``'s already
        (``claim``)."""
        cache = self.cache
        sibling, near = self._sibling(slot, job)
        if cache is None or len(job.prompt) < cache.min_tokens:
            found = None        # ``found``: `_cache_best`, looked up before the stash
        if sibling is not None and near >= own + RESTORE_MARGIN and \
                (found is None or near >= min(found[1], len(job.prompt) - 1)) and \
                self._copy_slot(sibling, slot):
            if cache is not None:
                cache.count("slot")
            return near, "slot"
        if cache is None or len(job.prompt) < cache.min_tokens:
            return own, "slot"
        common = min(found[1], len(job.prompt) - 1) if found is not None else 0
        if found is None or common < own + RESTORE_MARGIN or \
                len(found[0].tokens) >= self.n_ctx_seq:
            cache.count("miss" if own < RESTORE_MARGIN else "slot")
            return own, "slot"
        loaded = cache.load(found[0])
        if loaded is None:
            cache.count("miss" if own < RESTORE_MARGIN else "slot")
            return own, "slot"
        state, checkpoints, tier = loaded
        if not write_seq(self.ll, self.ctx, slot.seq_id, state):
            log.warning("llama.cpp refused a cached prompt state (%d tokens)",
                        len(found[0].tokens))
            self.forget(slot)
            cache.count("miss")
            return 0, "slot"
        slot.tokens[:] = found[0].tokens
        self.kv_replaced(slot)
        self._restore_checkpoints(slot, checkpoints)
        cache.count(tier, common)
        return common, tier

    def _sibling(self, slot: Slot, job: Job) -> tuple[Slot | None, int]:
        """The other slot of ``job``'s partition sharing the longest prefix with its prompt,
        and how many prompt tokens it can serve (at least one is left to evaluate)."""
        best, near = None, 0
        for other in self.slots:
            if other is slot or other.partition != job.partition or not other.tokens or \
                    other.tokens[0] == -1:
                continue
            n = min(common_prefix(other.tokens, job.prompt), len(job.prompt) - 1)
            if n > near:
                best, near = other, n
        return best, near

    def _copy_slot(self, source: Slot, slot: Slot) -> bool:
        """Copy ``source``'s KV state, tokens and checkpoints into ``slot`` (one state copy,
        ~1 ms per MB, on the decode thread between two steps, when both are consistent);
        False, and ``slot`` emptied, when llama.cpp refuses it."""
        if not write_seq(self.ll, self.ctx, slot.seq_id,
                         read_seq(self.ll, self.ctx, source.seq_id)):
            self.forget(slot)
            return False
        slot.tokens[:] = source.tokens
        self.kv_replaced(slot)
        slot.checkpoints[:] = [Checkpoint(c.n_tokens, bytearray(c.state))
                               for c in source.checkpoints]
        return True

    def _restore_checkpoints(self, slot: Slot, checkpoints: list[tuple[int, bytes]]) -> None:
        """Give the slot the checkpoints cached with its state (after ``kv_replaced``, which
        clears the old text's); those past its tokens are left out."""
        slot.checkpoints[:] = [Checkpoint(n, bytearray(state)) for n, state in checkpoints
                               if n <= len(slot.tokens)]
