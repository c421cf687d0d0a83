"""GET /v1/realtime?model=<chat model>: OpenAI's Realtime protocol over a WebSocket, composed
from the pool: its speech_to_text model hears, the chat model answers, its text_to_speech
model speaks (session in `inference.realtime`; protocol in docs/clients.md).

Before the upgrade (an HTTP error, no socket): the key (``Authorization``, or the
``openai-insecure-api-key.<key>`` subprotocol browsers send, `http.layers`), the page's
Origin (`http.browser`), the model (a text model, 400/404) and the bound on open sessions
(``limits.realtime_max_sessions``, 429). The session's three models are prefetched when it
opens; each turn is timed as the workflows ``realtime_turn`` (the user's commit to
response.done) and ``realtime_first_audio`` (to the answer's first audio) in
/v1/memory/status. ``rate_limits.updated`` lists the key's ``requests_per_minute`` and
``tokens_per_day`` as they stand (the session's tokens so far counted, though charged only
when it ends): an empty list when keys are off or the key has neither.
"""
from __future__ import annotations

import contextvars
import dataclasses
import time
from typing import cast
from collections.abc import Iterator

from sanic import Blueprint, Request, Websocket

from hypnos.service import errors
from hypnos.service.http.layers import route_gate
from hypnos.service.http.openapi import endpoint, needs_ready
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.capabilities import CHAT, require
from hypnos.service.inference.realtime import RealtimeSession, SessionDeps
from hypnos.service.inference.realtime_response import Voices
from hypnos.service.observe.record import RequestRecord, record_of
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.state import state_of
from hypnos.service.wire.realtime_in import new_id

bp = Blueprint("realtime")
PATH = "/v1/realtime"
SUBPROTOCOL = "realtime"
_offered: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "realtime_offered", default=())


class _Negotiated:
    """The route's subprotocols, read at the handshake: "realtime" when the client offers it
    (a browser must get one of those it offered back), none otherwise (the SDKs offer none,
    and a route with a fixed list would refuse them). Sanic reads a route's list once per
    handshake, in the request's own task, after `_before_upgrade` noted the offer."""

    def __iter__(self) -> Iterator[str]:
        return iter([SUBPROTOCOL] if SUBPROTOCOL in _offered.get() else [])


def pool_model(sched: Scheduler, modality: str) -> str | None:
    """The first enabled model of ``modality`` in the pool (the session's ears or voice)."""
    return next((st.id for st in sched.models.values()
                 if st.enabled and modality in st.cfg.all_modalities), None)


def _model(request: Request) -> str:
    model = request.args.get("model")
    if not model:
        raise errors.InvalidRequest("'model' is required: GET /v1/realtime?model=<a chat "
                                    "model>", param="model")
    require(state_of(request).scheduler, model, CHAT)
    return model


@bp.on_request
async def _before_upgrade(request: Request) -> None:
    """Refusals that are HTTP errors, before the handshake (after the route's own gate,
    which would otherwise run after this blueprint's middleware)."""
    if request.path != PATH:
        return
    route_gate(request)
    _offered.set(tuple(p.strip() for p in
                       request.headers.get("sec-websocket-protocol", "").split(",")))
    _model(request)
    app = state_of(request)
    if len(app.realtime.sessions) >= app.config.limits.realtime_max_sessions:
        raise errors.RateLimited(f"{len(app.realtime.sessions)} realtime sessions are open, "
                                 "limits.realtime_max_sessions; retry when one closes",
                                 headers={"Retry-After": "5"})


def _deps(request: Request, model: str) -> SessionDeps:
    app = state_of(request)
    sched, limits = app.scheduler, app.config.limits
    key = record_of(request).api_key

    def caller() -> Caller:
        record = RequestRecord(record_of(request).request_id, time.monotonic(), api_key=key)
        return Caller(sched=sched, limits=app.config.limits, metrics=app.metrics,
                      record=record)
    def timed(name: str, started: float, finished: float) -> None:
        flow = (name, new_id("turn"))
        app.workflows.begin(flow, started)
        app.workflows.end(flow, finished, True)

    def rate_limits(unbilled: int) -> list[dict]:
        return [] if key is None else [dataclasses.asdict(s)
                                       for s in app.limiter.standing(key, unbilled)]
    return SessionDeps(
        voices=Voices(model, pool_model(sched, "text_to_speech")),
        transcriber=pool_model(sched, "speech_to_text"), caller=caller,
        idle_secs=float(limits.realtime_idle_timeout_secs),
        max_buffer_secs=float(limits.realtime_max_buffer_secs), timed=timed,
        rate_limits=rate_limits)


# Sanic types the list as list[str] but only iterates it (at each handshake): hence the cast.
# Sanic's Blueprint.websocket has no annotations (mypy: it makes the handler untyped).
NEGOTIATED = cast(list[str], _Negotiated())


@bp.websocket(PATH, name="realtime", subprotocols=NEGOTIATED)  # type: ignore[untyped-decorator]
@needs_ready
@endpoint("Realtime voice (OpenAI's Realtime protocol: pcm16 24 kHz or G.711 mu-law / A-law "
          "audio, server VAD, partial transcripts, tools; docs/clients.md)", websocket=True,
          ok={}, query={"model": {"type": "string"}}, required_query=("model",),
          errors=(400, 404, 429, 503))
async def realtime(request: Request, ws: Websocket) -> None:
    """Returns when the session ends (hang-up or idle timeout)."""
    app = state_of(request)
    model = _model(request)
    deps = _deps(request, model)
    opened = app.realtime.open(model, app.config.limits.realtime_max_sessions)
    if opened is None:
        await ws.close(1013, "too many realtime sessions")
        return
    sid, info = opened
    for m in (model, deps.transcriber, deps.voices.speech):
        if m is not None:
            app.scheduler.prefetch(m)
    try:
        await RealtimeSession(ws, deps, info).run()
    finally:
        app.realtime.close(sid)
        record = record_of(request)     # the key is charged for every response's tokens
        record.tokens_in, record.tokens_out = info.tokens_in, info.tokens_out
