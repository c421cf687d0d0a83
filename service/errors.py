"""One error root and a subclass per row of the spec's error table (section 4), and the one
map from an engine's errors (``from_engine``) and the scheduler's refusals (``from_refusal``)
to them.

Routes and the inference layer raise these; the scheduler raises its own typed refusals
(`refusals`), which become these where requests meet it: the inference layer
(``refusals_as_http``) and, for the routes that call the scheduler directly, the error
handler. `install_error_handlers` renders every one of them as the spec's envelope. Anything
else becomes a 500 ``server_error`` naming the request id. A new engine error or refusal is
one line here (tests/http/test_error_map.py fails until it is).
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sanic import Sanic
from sanic.exceptions import (BadRequest, HeaderNotFound, MethodNotAllowed, NotFound,
                              PayloadTooLarge, RequestTimeout, SanicException,
                              ServiceUnavailable)
from sanic.response import json as json_response
from sanic.response import text as text_response

from hypnos.engines import errors as eng
from hypnos.planner.loading import NoRoom, OverProcessCap, TooBig
from hypnos.service import refusals


log = logging.getLogger("hypnos.errors")


class HypnosError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict | None = None, with_code: bool = False):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.code
        self.headers = headers or {}
        # Auth and quota errors always carry "param" and "code" (spec section 2).
        self.with_code = with_code or self.code is not None or param is not None

    def body(self) -> dict:
        err: dict[str, str | None] = {"message": self.message, "type": self.type}
        if self.with_code:
            err["param"] = self.param
            err["code"] = self.code
        return {"error": err}


class InvalidRequest(HypnosError):
    status, type = 400, "invalid_request_error"


class Unauthorized(HypnosError):
    status, type, code = 401, "invalid_request_error", "invalid_api_key"


class PermissionDenied(HypnosError):
    status, type = 403, "permission_denied"


class ModelNotFound(HypnosError):
    status, type = 404, "model_not_found"


class ModelDisabled(HypnosError):
    status, type = 404, "model_disabled"


class NotFoundError(HypnosError):
    status, type = 404, "not_found"


class MethodNotAllowedError(HypnosError):
    status, type = 405, "method_not_allowed"


class PayloadTooLargeError(HypnosError):
    status, type = 413, "payload_too_large"


class UnprocessableEntity(HypnosError):
    status, type = 422, "invalid_request_error"


class ModelBusy(HypnosError):
    status, type = 429, "model_busy"


class RateLimited(HypnosError):
    status, type = 429, "rate_limit_error"


class ModelNotAvailable(HypnosError):
    status, type = 503, "model_not_available"


class DeadlineUnmeetable(HypnosError):
    status, type = 503, "deadline_unmeetable"


class InsufficientMemory(HypnosError):
    status, type = 507, "insufficient_vram_or_ram"


class ProcessMemoryCap(HypnosError):
    status, type = 507, "process_memory_cap"


class ServerError(HypnosError):
    status, type = 500, "server_error"


class ContextOverBudget(HypnosError):
    """A prompt past the model's effective window (Pantheon's 422): never truncated."""
    status, type, code = 422, "context_over_budget", "context_over_budget"

    def __init__(self, prompt_tokens: int, cap: int):
        super().__init__(f"The prompt takes {prompt_tokens} tokens, past this model's context "
                         f"window of {cap} tokens (kv_used={prompt_tokens}, kv_cap={cap}); "
                         "shorten the conversation", param="messages")
        self.kv_used, self.kv_cap = prompt_tokens, cap

    def body(self) -> dict:
        out = super().body()
        out["error"].update(kv_used=self.kv_used, kv_cap=self.kv_cap)
        return out


class SessionNotFound(HypnosError):
    status, type = 404, "session_not_found"


class BusySession(HypnosError):
    status, type = 429, "session_busy"


class BadSessionBlob(HypnosError):
    status, type = 400, "bad_session_blob"


class SessionConflict(HypnosError):
    status, type = 409, "session_weights_mismatch"


class PoolConflict(HypnosError):
    """A change of the model pool that the rest of the pool contradicts (another model names
    the one removed as its draft, an id that is another model's alias): saved, it would make
    the next start refuse the config."""
    status, type = 409, "pool_conflict"


class AtSessionCapacity(HypnosError):
    status, type = 429, "model_at_session_capacity"


class DoesNotFitAlone(InsufficientMemory):
    """507 that no waiting can cure: the model is larger than tier 1 even when empty (a
    configuration problem, not contention; the message says what to change)."""


# Refusals decided by the scheduler (hypnos_scheduler_admissions_rejected_total).
ADMISSION_TYPES = ("model_busy", "deadline_unmeetable", "insufficient_vram_or_ram",
                   "process_memory_cap")
STAGING_MESSAGE = ("Hypnos is still pre-staging its startup models; retry shortly "
                   "(GET /ready reports when it is done)")


def staging_error() -> ModelNotAvailable:
    return ModelNotAvailable(STAGING_MESSAGE, headers={"Retry-After": "5"})


def from_engine(exc: Exception, *, param: str | None = None, window: int | None = None,
                what: str = "The engine") -> HypnosError:
    """The one engine-error -> HTTP map. ``param`` names the request field the engine read
    (``input``, ``file``, ``messages``...); ``window`` is the model's context window, for a
    chat prompt past it (a 422 with the KV numbers). Anything not listed is a 500 saying
    "<what> failed"."""
    if isinstance(exc, HypnosError):
        return exc
    if isinstance(exc, eng.WorkerLost):
        return ModelNotAvailable(f"{exc}; the next request plans the model again with the "
                                 "RPC workers that answer", headers={"Retry-After": "5"})
    if isinstance(exc, eng.EngineUnavailable):
        return ModelNotAvailable(str(exc))
    if isinstance(exc, eng.MediaDecodeError):
        return InvalidRequest(f"A media part could not be read: {exc}", param="messages")
    if isinstance(exc, eng.ContextOverflow):
        if window is not None:
            return ContextOverBudget(exc.prompt_tokens, window or exc.cap)
        return InvalidRequest(str(exc), param=param)
    if isinstance(exc, eng.AudioDecodeError):
        return InvalidRequest(f"The '{param}' upload is not audio that can be decoded: {exc}",
                              param=param)
    if isinstance(exc, eng.UnsupportedDocument):
        return InvalidRequest(f"The document cannot be converted: {exc}", param=exc.param)
    if isinstance(exc, eng.InvalidGrammar):
        return InvalidRequest(str(exc))
    if isinstance(exc, eng.NoChatTemplate):
        return InvalidRequest(str(exc), param="messages")
    if isinstance(exc, eng.SessionCapacity):
        return AtSessionCapacity(str(exc), headers={"Retry-After": "30"})
    if isinstance(exc, eng.SessionBusy):
        return BusySession(str(exc))
    if isinstance(exc, eng.SessionCorrupt):
        return BadSessionBlob(str(exc))
    if isinstance(exc, eng.SessionMismatch):
        return SessionConflict(str(exc))
    if isinstance(exc, eng.SessionNotFound):
        return SessionNotFound(str(exc))
    return ServerError(f"{what} failed: {exc}")


# Each refusal of the scheduler and its error; a load refused by the planner by its reason.
REFUSALS: dict[type[refusals.Refused], type[HypnosError]] = {
    refusals.UnknownModel: ModelNotFound, refusals.DisabledModel: ModelDisabled,
    refusals.Busy: ModelBusy, refusals.OverDeadline: DeadlineUnmeetable,
    refusals.NotServable: ModelNotAvailable, refusals.NotLoaded: ModelNotAvailable}
LOAD_REFUSALS: dict[type, type[HypnosError]] = {
    TooBig: DoesNotFitAlone, NoRoom: InsufficientMemory, refusals.WorkersBusy: InsufficientMemory,
    OverProcessCap: ProcessMemoryCap}


def from_refusal(exc: refusals.Refused) -> HypnosError:
    """The one scheduling-refusal -> HTTP map; a refusal's retry hint is Retry-After. A
    failed load is a 500 naming it, unless the engine cannot be served here or lost an RPC
    worker (the 503s ``from_engine`` gives them during a call too): an error about a
    request's content cannot come from a load."""
    if isinstance(exc, refusals.LoadFailed):
        if isinstance(exc.error, (eng.EngineUnavailable, eng.WorkerLost)):
            return from_engine(exc.error)
        return ServerError(exc.message)
    if isinstance(exc, refusals.LoadRefused):
        cls = LOAD_REFUSALS[type(exc.refusal)]
    else:
        cls = REFUSALS[type(exc)]
    headers = None if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
    return cls(exc.message, headers=headers)


@contextmanager
def refusals_as_http() -> Iterator[None]:
    """A scheduling refusal raised in the block leaves it as its HTTP error."""
    try:
        yield
    except refusals.Refused as exc:
        raise from_refusal(exc) from None


# HTTP status -> the error type of Anthropic's envelope (the /v1/messages routes).
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                   403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                   429: "rate_limit_error", 503: "overloaded_error"}


def anthropic_body(status: int, message: str) -> dict:
    """Anthropic's error envelope: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_response(exc: HypnosError, request=None):
    """The error's envelope: OpenAI's shape (the spec's), Anthropic's on /v1/messages (and
    /v1/models asked by an anthropic SDK), Ollama's on /api/*."""
    body = exc.body()
    if request is not None and (request.path.startswith("/v1/messages") or (
            request.path.startswith("/v1/models") and "anthropic-version" in request.headers)):
        body = anthropic_body(exc.status, exc.message)
    elif request is not None and request.path.startswith("/api/"):
        body = {"error": exc.message}          # Ollama's envelope
    return json_response(body, status=exc.status, headers=exc.headers)


def install_error_handlers(app: Sanic) -> None:
    @app.exception(HypnosError, refusals.Refused)
    async def _hypnos(request, exc: HypnosError | refusals.Refused):
        if isinstance(exc, refusals.Refused):     # a route that called the scheduler itself
            exc = from_refusal(exc)
        if exc.type in ADMISSION_TYPES:
            request.app.ctx.metrics.rejected.inc()
        return error_response(exc, request)

    @app.exception(NotFound)
    async def _not_found(request, exc):
        return error_response(NotFoundError(
            f"Unknown route {request.method} {request.path}; the API lives under /v1"), request)

    @app.exception(MethodNotAllowed)
    async def _method(request, exc: MethodNotAllowed):
        # A known path, another method: 405 with the Allow header HTTP asks for (RFC 9110).
        allowed = ", ".join(sorted(exc.allowed_methods or ()))
        return error_response(MethodNotAllowedError(
            f"{request.method} is not allowed on {request.path}; it takes {allowed}",
            headers={"Allow": allowed}), request)

    @app.exception(PayloadTooLarge)
    async def _too_large(request, exc):
        # The body-limit layer answers plain text for JSON bodies, the JSON error naming the
        # limit for multipart uploads (spec section 4).
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            limit = request.app.config.REQUEST_MAX_SIZE
            return error_response(PayloadTooLargeError(
                f"The upload is larger than max_body_bytes ({limit} bytes)"))
        return text_response("Payload Too Large", status=413)

    # Sanic's "Response Timeout" (ServiceUnavailable) is the same limit, request_timeout_secs,
    # reached while a body was still arriving or a handler ran: the spec's 408, not a 500.
    @app.exception(RequestTimeout, ServiceUnavailable)
    async def _timeout(request, exc):
        return text_response("Request Timeout", status=408)

    @app.exception(BadRequest, HeaderNotFound)
    async def _bad(request, exc):
        return error_response(InvalidRequest(str(exc) or "malformed request"), request)

    @app.exception(SanicException)
    async def _sanic(request, exc: SanicException):
        status = getattr(exc, "status_code", 500) or 500
        if status >= 500:
            return _server_error(request, exc)
        return error_response(InvalidRequest(str(exc)), request)

    @app.exception(Exception)
    async def _unexpected(request, exc):
        return _server_error(request, exc)


def _server_error(request, exc):
    # The request's `observe.record.RequestRecord` (read here without importing it: that
    # module names the key types, which raise these errors); none before the middleware ran.
    record = getattr(request.ctx, "record", None)
    rid = record.request_id if record is not None else "unknown"
    log.error("unexpected error in %s %s (%s)", request.method, request.path, rid,
              exc_info=exc)
    return error_response(ServerError(
        f"The server failed on this request ({type(exc).__name__}); "
        f"report it with x-request-id {rid}"), request)
