"""JSON text as a request sends it (a body, a multipart field, a WebSocket frame), parsed
strictly: Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity``, which JSON does
not have, and reads ``1e400`` as infinity; here each is a 400 naming it, so no non-finite
number reaches a route (a keep_alive, a temperature, a timer)."""
from __future__ import annotations

import json
import math
from typing import Any

from hypnos.service.errors import InvalidRequest


class _NonFinite(ValueError):
    pass


def _constant(literal: str) -> float:
    raise _NonFinite(f"{literal} is not JSON (JSON numbers are finite); send a number or null")


def _number(literal: str) -> float | int:
    """A JSON number with a fraction or exponent. JSON has one number type and JSON Schema
    calls 2480.0 an integer, so an integral value reads as an int (within int64): a schema's
    ``integer`` field then accepts it, as the published document says it must."""
    value = float(literal)
    if not math.isfinite(value):
        raise _NonFinite(f"the number {literal} is too large for a 64-bit float")
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def loads(raw: str | bytes, what: str, param: str | None = None) -> Any:
    """``raw`` parsed, or a 400 (``param`` named) beginning with ``what`` ("The request
    body") and saying what is wrong."""
    try:
        return json.loads(raw, parse_float=_number, parse_constant=_constant)
    except _NonFinite as exc:
        raise InvalidRequest(f"{what} is refused: {exc}", param=param) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"{what} is not valid JSON: {exc}", param=param) from None
    except RecursionError:
        raise InvalidRequest(f"{what} is nested too deeply to parse", param=param) from None
