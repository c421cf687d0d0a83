"""Sessions of ``LlamaChatEngine`` and its KV parking: export / import of a session blob,
binding keys to slots, ``park`` / ``restore`` of every slot across an unload (through the
prompt cache when the engine has one: ``prompt_reuse.park_in_cache``). Every per-slot
KV state move runs on the decode thread through ``state`` (``_call``). A mixin over the
engine's ``_loop``, ``_ll``, ``_ctx``, ``layout``, ``fingerprint``, ``model_id``, ``slots``
and ``n_ctx_per_slot``."""
from __future__ import annotations

import time

from hypnos.engines.errors import EngineError, SessionMismatch
from hypnos.engines.llama import state as llama_state
from hypnos.engines.llama.state import ParkedKV


class SessionsMixin:
    """Session export / import / release and KV parking over the decode thread (see the
    module)."""

    # ------------------------------------------------------------------ KV parking

    def park(self) -> ParkedKV | None:
        """Keep every slot that holds tokens (KV state + token list), to be given to
        ``restore`` after the next ``load``: with a prompt cache in the cache (what it cannot
        take is copied), else copied into host memory. Call while no request runs, before
        ``unload``; blocks for about 1 ms per MB. None when nothing is loaded or cached."""
        if self._loop is None:
            return None
        parked = ParkedKV(self.model_id, self.layout, self.fingerprint)
        if self._loop.cache is not None:    # parked in the prompt cache, not copied twice
            self._call(lambda loop: loop.park_in_cache(parked))
        else:
            self._call(lambda loop: llama_state.park_slots(self._ll, self._ctx, loop, parked))
        return parked if parked.slots else None

    def restore(self, parked: ParkedKV) -> tuple[int, float]:
        """Load a ``park`` result into the same slots, right after ``load`` (the slots parked
        in the prompt cache from the cache, when their entries are still there); returns
        (tokens restored, ms). Only a state parked from the same weights (fingerprint) with the same
        KV types is used (a context rebuilt larger takes its slots: the rebuild keeps every
        cached prefix); anything else gives (0, 0.0), so the conversations prefill as
        before. ``parked`` is emptied either way (single use). Blocks."""
        if (self._loop is None or not parked.slots
                or not self.layout.takes_parked(parked.layout)
                or parked.fingerprint != self.fingerprint):
            parked.drop()
            return 0, 0.0
        t0 = time.perf_counter()
        restored = self._call(
            lambda loop: llama_state.restore_slots(self._ll, self._ctx, loop, parked)
            + (loop.restore_parked(parked.cached) if parked.cached else 0))
        parked.drop()
        return restored, (time.perf_counter() - t0) * 1e3

    # ------------------------------------------------------------------ sessions

    def export_session(self, slot_or_key: int | str) -> bytes:
        """A session blob (tokens, weights fingerprint, KV layout, KV state; checksummed)
        of the slot bound to a session key, or of a slot index. Blocks about 1 ms per MB.
        Raises SessionNotFound (no such key/slot, or it holds nothing) and SessionBusy (a
        turn is running on it)."""
        return self._call(lambda loop: llama_state.export_slot(
            self._ll, self._ctx, loop, slot_or_key, self.fingerprint, self.layout))

    def import_session(self, blob: bytes, key: str, partition: str = "") -> int:
        """Load a session blob into the slot bound to ``key`` (binding a free one) as
        ``partition``'s tokens (only its requests reuse them); returns the tokens now cached
        there. Raises SessionCorrupt (not an intact blob),
        SessionMismatch (other weights, another KV type, or longer than a slot),
        SessionCapacity (every slot bound to other keys), SessionBusy (the key's slot, or
        every unbound slot, is generating)."""
        session = llama_state.decode_session(blob)
        if self._loop is None:
            raise EngineError("model not loaded")
        if session.fingerprint != self.fingerprint:
            raise SessionMismatch("the session was made with other weights")
        if not self.layout.accepts_session(session.layout, len(session.tokens)):
            raise SessionMismatch(
                f"the session ({len(session.tokens)} tokens, KV {session.layout}) does not fit "
                f"a slot of this model ({self.n_ctx_per_slot} tokens)")
        return self._call(
            lambda loop: llama_state.import_slot(self._ll, self._ctx, loop, key, session,
                                                 partition))

    def release_session(self, key: str) -> bool:
        """Unbind ``key`` from its slot (the KV stays for prefix reuse until another
        conversation needs the slot). Idempotent; False when it was not bound."""
        loop = self._loop
        return loop.release(key) if loop is not None else False

    def sessions(self) -> dict[str, int]:
        """Bound session keys -> tokens cached in their slot."""
        loop = self._loop
        if loop is None:
            return {}
        with loop.cond:
            return {s.key: len(s.tokens) for s in loop.slots if s.key is not None}

    @property
    def max_sessions(self) -> int:
        return self.slots

    def _call(self, fn):
        """``fn(loop)`` on the decode thread (see ``DecodeLoop.call``)."""
        loop = self._loop
        if loop is None:
            raise EngineError("model not loaded")
        try:
            return loop.call(lambda: fn(loop))
        except RuntimeError as exc:
            if loop.closing:
                raise EngineError("model unloaded") from exc
            raise
