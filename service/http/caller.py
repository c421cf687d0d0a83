"""The route's side of `inference.caller.Caller`: the app's scheduler, limits and metrics, the
request's record and its x-hypnos-deadline-ms, read once from the Sanic request; and the
engine's session key of the session a request names (its key's own)."""
from __future__ import annotations

from sanic import Request

from hypnos.service.inference.caller import Caller
from hypnos.service.observe.record import record_of
from hypnos.service.state import state_of
from hypnos.service.wire.sessions import owned_session, session_name


def caller_of(request: Request) -> Caller:
    """The narrow dependencies the inference layer takes for ``request``."""
    app = state_of(request)
    return Caller(sched=app.scheduler, limits=app.config.limits, metrics=app.metrics,
                  record=record_of(request),
                  deadline_header=request.headers.get("x-hypnos-deadline-ms"))


def session_key(request: Request, body: dict | None) -> str | None:
    """The engine's session key of the session the request names (`wire.sessions`: under
    its key's owner id), or None."""
    name = session_name(request, body)
    return owned_session(record_of(request).owner, name) if name is not None else None
