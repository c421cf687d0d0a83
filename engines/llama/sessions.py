"""Sessions of ``LlamaChatEngine``: export / import of a session blob and binding keys to
slots. Every per-slot KV state move (these, and ``park`` / ``restore`` in ``engine``) runs on
the decode thread through ``state`` (``_call``). A mixin over the engine's ``_loop``, ``_ll``,
``_ctx``, ``layout``, ``fingerprint``, ``model_id``, ``slots`` and ``n_ctx_per_slot``."""
from __future__ import annotations

from hypnos.engines.errors import EngineError, SessionMismatch
from hypnos.engines.llama import state as llama_state


class SessionsMixin:
    """Session export / import / release over the decode thread (see the module)."""

    # ------------------------------------------------------------------ sessions

    def export_session(self, slot_or_key: int | str) -> bytes:
        """A session blob (tokens, weights fingerprint, KV layout, KV state; checksummed)
        of the slot bound to a session key, or of a slot index. Blocks about 1 ms per MB.
        Raises SessionNotFound (no such key/slot, or it holds nothing) and SessionBusy (a
        turn is running on it)."""
        return self._call(lambda loop: llama_state.export_slot(
            self._ll, self._ctx, loop, slot_or_key, self.fingerprint, self.layout))

    def import_session(self, blob: bytes, key: str) -> int:
        """Load a session blob into the slot bound to ``key`` (binding a free one); returns
        the tokens now cached there. Raises SessionCorrupt (not an intact blob),
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
            lambda loop: llama_state.import_slot(self._ll, self._ctx, loop, key, session))

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
