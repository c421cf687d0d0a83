"""Reading a request's body and headers into values: the JSON object (no NaN or Infinity,
wire/json_text.py), a wire model validated from it, the deadline header. Every problem is a
400 naming it.

No Sanic here: the reader takes anything with the request's ``body`` bytes and ``headers``
(`Incoming`), which a Sanic request is.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from hypnos.service import errors
from hypnos.service.wire import json_text
from hypnos.service.wire.model import M, validate


class Incoming(Protocol):
    """What the readers need of a request: its raw body and its headers."""

    @property
    def body(self) -> bytes: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


def json_body(request: Incoming) -> dict:
    """The request's JSON object, or a 400 naming what is wrong (wire/json_text.py: no NaN
    or Infinity)."""
    if not request.body:
        raise errors.InvalidRequest("The request body is empty; send a JSON object")
    body = json_text.loads(request.body, "The request body")
    if not isinstance(body, dict):
        raise errors.InvalidRequest("The request body must be a JSON object")
    return body


def read_body(request: Incoming, model: type[M]) -> M:
    """The request's JSON object validated as ``model`` (the route's ``@endpoint(body=)``),
    or a 400 naming the field."""
    return validate(model, json_body(request))


def deadline_ms(request: Incoming) -> float | None:
    """x-hypnos-deadline-ms, or None; a 400 when it is not a number."""
    return deadline_of(request.headers)


def deadline_of(headers: Mapping[str, str]) -> float | None:
    """x-hypnos-deadline-ms from ``headers``, or None; a 400 when it is not a number."""
    return parse_deadline(headers.get("x-hypnos-deadline-ms"))


def parse_deadline(raw: str | None) -> float | None:
    """An x-hypnos-deadline-ms value as sent, or None; a 400 when it is not a number."""
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise errors.InvalidRequest("x-hypnos-deadline-ms must be a number of milliseconds") \
            from None
