"""The one door from a route to an engine: check, lease, call, time, map errors, telemetry.

    async with leased(caller, model_id, EMBEDDINGS) as call:
        result = await call.run(call.embedder.embed, texts)
        body = {..., "hypnos_telemetry": call.telemetry({"queue_ms": call.queue_ms})}

``leased`` refuses a model that cannot serve the family before anything loads
(``capabilities.require``), then holds one scheduler lease for the block. ``call.run`` runs a
blocking engine call in a worker thread with the cancel flag set when the client goes away,
adds its time to ``inference_ms``, and turns an engine error into the HTTP error the one map
(``errors.from_engine``) gives; what the scheduler refuses (``refusals``) leaves
as the HTTP error ``errors.from_refusal`` gives. Nothing else in the service calls
``scheduler.lease``.
"""
from __future__ import annotations

import asyncio
import threading
import time
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar, cast
from collections.abc import AsyncIterator, Callable

from hypnos.engines.errors import EngineError
from hypnos.engines.protocols import (ChatEngine, Converter, Embedder, Engine, Extractor,
                                      ImageGenerator, KVChatEngine, Speaker, Transcriber)
from hypnos.service import errors
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.capabilities import Family, require
from hypnos.service.observe.record import current_record
from hypnos.service.observe.telemetry import telemetry, telemetry_headers, wait_headers
from hypnos.service.scheduling.lease import Lease
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.scheduler import Fit, Scheduler

T = TypeVar("T")


async def run_engine(call: Callable[..., T], *args: Any, cancel: threading.Event) -> T:
    """Run ``call(*args, cancel)`` in a worker thread. When the awaiting request is cancelled
    (the client hung up) the ``cancel`` flag is set and this waits for the engine to stop at
    its next token, chunk, phrase or batch before re-raising, so the lease ends only once the
    engine is idle again."""
    task = asyncio.ensure_future(asyncio.to_thread(call, *args, cancel))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        cancel.set()
        await asyncio.wait({task})
        raise


class LeasedCall:
    """A lease on a model that can serve the family, and the engine calls made under it.

    The engine is read as its family's Protocol (``call.chat``, ``call.embedder``, ...): the
    family was checked against the registry before the lease (``capabilities.require``), so
    the model's engine is of that kind, and it stays loaded for the whole lease. Reading
    another family's is a mistake no type checker sees; a route reads only its own."""

    def __init__(self, sched: Scheduler, lease: Lease, param: str | None):
        self.sched, self.lease, self.param = sched, lease, param
        self.inference_ms = 0.0
        self.cancel = threading.Event()

    @property
    def engine(self) -> Engine:
        return self.lease.engine

    @property
    def chat(self) -> ChatEngine:
        return cast(ChatEngine, self.lease.engine)

    @property
    def sessions(self) -> KVChatEngine:
        """A chat engine with a session cache (``registry.SESSIONS``, checked first)."""
        return cast(KVChatEngine, self.lease.engine)

    @property
    def embedder(self) -> Embedder:
        return cast(Embedder, self.lease.engine)

    @property
    def transcriber(self) -> Transcriber:
        return cast(Transcriber, self.lease.engine)

    @property
    def speaker(self) -> Speaker:
        return cast(Speaker, self.lease.engine)

    @property
    def converter(self) -> Converter:
        return cast(Converter, self.lease.engine)

    @property
    def extractor(self) -> Extractor:
        return cast(Extractor, self.lease.engine)

    @property
    def generator(self) -> ImageGenerator:
        return cast(ImageGenerator, self.lease.engine)

    @property
    def model(self) -> ModelState:
        return self.lease.model

    @property
    def queue_ms(self) -> float:
        return round(self.lease.queue_ms, 2)

    @property
    def window(self) -> int:
        """The model's context window (what /v1/models advertises)."""
        return self.sched.context_window(self.lease.model)

    async def run(self, fn: Callable[..., T], *args: Any, window: int | None = None,
                  what: str = "The engine") -> T:
        """``fn(*args, cancel)`` in a worker thread, timed; an engine error becomes the HTTP
        error ``errors.from_engine`` maps it to (``window``: a chat prompt past it is 422;
        ``what`` names the step in a 500's message)."""
        started = time.monotonic()
        try:
            return await run_engine(fn, *args, cancel=self.cancel)
        except EngineError as exc:
            raise errors.from_engine(exc, param=self.param, window=window, what=what) from None
        finally:
            self.inference_ms += (time.monotonic() - started) * 1000

    def placement(self) -> dict[str, Any]:
        return self.sched.placement_of(self.lease.model).to_wire()

    def telemetry(self, engine: dict, placement: dict | None = None,
                  inference_ms: float | None = None) -> dict:
        """``hypnos_telemetry`` for the response (placement read now unless given)."""
        return telemetry(self.lease, placement or self.placement(),
                         self.inference_ms if inference_ms is None else inference_ms, engine)

    def telemetry_headers(self, audio_secs: float | None = None) -> dict:
        return telemetry_headers(self.lease, self.placement(), self.inference_ms, audio_secs)

    def wait_headers(self) -> dict:
        return wait_headers(self.lease)


@asynccontextmanager
async def leased_by(sched: Scheduler, model_id: str, family: Family, *,
                    param: str | None = None, deadline_ms: float | None = None,
                    context_len: int | None = None, fit: Fit | None = None,
                    checked: bool = False) -> AsyncIterator[LeasedCall]:
    """Check that ``model_id`` can serve ``family`` (unless the caller just did:
    ``checked``), then lease it for the block. ``param`` names the request field the engine
    reads, for its errors; ``context_len`` and ``fit`` are the scheduler's (see
    ``Scheduler.lease``). The lease is added to the record of the request being served
    (`observe.record`), if any, once admitted."""
    if not checked:
        require(sched, model_id, family)
    record = current_record()
    with errors.refusals_as_http():
        async with sched.lease(model_id, deadline_ms=deadline_ms, context_len=context_len,
                               fit=fit, on_admit=record.leases.append if record else None
                               ) as lease:
            yield LeasedCall(sched, lease, param)


def leased(caller: Caller, model_id: str, family: Family,
           **kw: Any) -> AbstractAsyncContextManager[LeasedCall]:
    """``leased_by`` for a route's request: its caller's scheduler and deadline."""
    return leased_by(caller.sched, model_id, family, deadline_ms=caller.deadline_ms, **kw)
