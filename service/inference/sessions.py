"""Session state on a chat engine (the /v1/sessions routes): export, restore, release.

Restore takes a lease (it loads the model and fills a slot). Export and release only touch a
model that is already loaded: they hold it (``Scheduler.hold``: not evicted meanwhile, not
loaded for this) and never pay a load for a session that cannot exist.
"""
from __future__ import annotations

import asyncio
from typing import cast

from hypnos.engines import registry
from hypnos.engines.errors import EngineError, SessionNotFound
from hypnos.engines.protocols import KVChatEngine
from hypnos.service import errors
from hypnos.service.refusals import NotLoaded
from hypnos.service.inference.capabilities import CHAT
from hypnos.service.inference.leased import leased_by
from hypnos.service.observe.record import current_record
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.scheduler import Scheduler


def session_model(sched: Scheduler, model_id: object) -> ModelState:
    """The state of a chat model with a session cache; 400 (code session_caching_disabled)
    for any other."""
    if not isinstance(model_id, str) or not model_id:
        raise errors.InvalidRequest("'model' is required and must be a string", param="model")
    with errors.refusals_as_http():
        st = sched.get(model_id)
    if registry.SESSIONS not in registry.capabilities(st.cfg.engine, st.cfg.modality):
        raise errors.InvalidRequest(f"The model '{model_id}' has no session cache",
                                    code="session_caching_disabled")
    return st


async def export(sched: Scheduler, st: ModelState, key: str, name: str) -> tuple[bytes, int]:
    """The blob of the session bound to engine key ``key`` and its token count; 404 when the
    model is not loaded or holds no such session. Messages name the session by ``name`` (the
    client's), never by the owner-scoped key. Whether the model is loaded is read once the
    hold is taken: its wait can span a swap that unloads it."""
    with errors.refusals_as_http():
        try:
            async with sched.hold_engine(st.id) as held:
                engine = cast(KVChatEngine, held)   # session_model checked the capability
                try:
                    blob = await asyncio.to_thread(engine.export_session, key)
                except SessionNotFound:
                    raise errors.SessionNotFound(
                        f"No session {name!r} holding tokens on '{st.id}'") from None
                except EngineError as exc:
                    raise errors.from_engine(exc, param="session_id") from None
                return blob, engine.sessions().get(key, 0)
        except NotLoaded:
            raise errors.SessionNotFound(
                f"No live session {name!r}: the model is not loaded") from None


async def restore(sched: Scheduler, st: ModelState, key: str, blob: bytes) -> int:
    """Load the model if needed and bind ``blob`` to ``key``, reusable by the restoring
    key's requests only; the restored token count."""
    record = current_record()
    owner = record.owner if record is not None else ""
    async with leased_by(sched, st.id, CHAT, param="blob", checked=True) as call:
        return await call.run(lambda b, k, _cancel: call.sessions.import_session(b, k, owner),
                              blob, key)


async def release(sched: Scheduler, st: ModelState, key: str) -> None:
    """Free the session's slot binding if the model is loaded, and drop the prompt cache's
    entries of the session (loaded or not)."""
    if sched.prompt_cache is not None:
        sched.prompt_cache.drop_session(key)
    with errors.refusals_as_http():
        try:
            async with sched.hold_engine(st.id) as held:
                await asyncio.to_thread(cast(KVChatEngine, held).release_session, key)
        except NotLoaded:
            return
