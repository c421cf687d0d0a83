"""The request log (spec section 15): a ring buffer of recent inference calls.

`RequestLog.observe` runs once a response is complete (streams: after the last byte) and
builds one record from what the request left behind: the leases it took (`request_leases`,
filled by the scheduler), the engine result on ``request.ctx.result``, the response status
and, for a JSON answer, its body. Polling (GET routes, the log routes themselves, /metrics)
is not logged. The captured text (input, output at debug; payloads at trace) is cut at
`MAX_CAPTURE` characters and passed through ``request_log.redact``.
"""
from __future__ import annotations

import contextvars
import datetime as dt
import json
import re
import time
from collections import deque

from hypnos.service.config.schema import RequestLogConfig

LEVELS = ("off", "error", "warn", "info", "debug", "trace")
MAX_CAPTURE = 64 * 1024
REDACTED = "[redacted]"
# The leases a request took: set per request by the HTTP layer, appended to by the
# scheduler (so the log knows the model, its previous tier and the switch time).
request_leases: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "request_leases", default=None)


def record_level(status: int) -> str:
    return "error" if status >= 500 else "warn" if status >= 400 else "info"


class RequestLog:
    def __init__(self, cfg: RequestLogConfig):
        self.level = cfg.level
        self.records: deque[dict] = deque(maxlen=cfg.capacity)
        self.redact_all = "*" in cfg.redact
        self.patterns = [re.compile(p) for p in cfg.redact if p != "*"]

    @property
    def capacity(self) -> int:
        return self.records.maxlen

    def captures(self, level: str) -> bool:
        return LEVELS.index(self.level) >= LEVELS.index(level)

    def _text(self, value, record: dict) -> str | None:
        if value is None:
            return None
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > MAX_CAPTURE:
            text, record["truncated"] = text[:MAX_CAPTURE], True
        if self.redact_all:
            return ""
        for pattern in self.patterns:
            text = pattern.sub(REDACTED, text)
        return text

    def add(self, record: dict) -> None:
        if self.captures(record["level"]):
            self.records.append(record)

    def find(self, request_id: str) -> dict | None:
        return next((r for r in self.records if r["id"] == request_id), None)

    def query(self, model=None, route=None, status=None, key=None, limit=None) -> list[dict]:
        """Newest first. ``status``: ok, error, 4xx or 5xx."""
        def keep(r):
            if model is not None and r["model"] != model:
                return False
            if route is not None and r["route"] != route:
                return False
            if key is not None and r["key"] != key:
                return False
            s = r["status"]
            return {None: True, "ok": s < 400, "error": s >= 400, "4xx": 400 <= s < 500,
                    "5xx": s >= 500}[status]
        out = [r for r in reversed(self.records) if keep(r)]
        return out[:limit] if limit is not None else out

    # ------------------------------------------------------------------ building a record

    def observe(self, request, route: str, status: int, duration_ms: float,
                response_body: bytes | None) -> None:
        level = record_level(status)
        if not self.captures(level):
            return
        body = _json(request.body) if request.body else None
        result = getattr(request.ctx, "result", None)
        leases = getattr(request.ctx, "leases", None) or []
        lease = leases[-1] if leases else None
        answer = _json(response_body) if response_body else None
        record = {
            "id": request.ctx.request_id, "route": route, "method": request.method,
            "status": status,
            "key": getattr(getattr(request.ctx, "api_key", None), "label", None),
            "started_at": dt.datetime.fromtimestamp(
                time.time() - duration_ms / 1000, dt.UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "duration_ms": round(duration_ms, 2),
            "model": lease.model.id if lease else (body or {}).get("model"),
            "stream": bool((body or {}).get("stream", False)),
            "tokens_in": getattr(result, "prompt_tokens", None),
            "tokens_out": getattr(result, "completion_tokens", None),
            "cached_tokens": getattr(result, "cached_tokens", None),
            "tokens_per_s": _round(getattr(getattr(result, "timings", None),
                                           "decode_tokens_per_s", None)),
            "inference_ms": _inference_ms(result, answer),
            "tier_switch_ms": round(lease.tier_switch_ms, 2) if lease else None,
            "previous_tier": str(lease.previous_tier) if lease else None,
            "error": ((answer or {}).get("error") or {}).get("message")
            if status >= 400 and isinstance(answer, dict) else None,
            "level": level, "truncated": False,
        }
        if self.captures("debug"):
            raw = body or {}
            record["input"] = self._text(raw.get("messages", raw.get("input")), record)
            record["output"] = self._text(getattr(result, "text", None), record)
        if self.captures("trace"):
            record["request_payload"] = self._text(
                request.body.decode("utf-8", "replace") if request.body else None, record)
            record["response_payload"] = self._text(
                response_body.decode("utf-8", "replace") if response_body else None, record)
        self.add(record)


def _json(raw: bytes):
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _round(value):
    return round(value, 2) if isinstance(value, float) else value


def _inference_ms(result, answer) -> float | None:
    tele = (answer or {}).get("hypnos_telemetry") if isinstance(answer, dict) else None
    if isinstance(tele, dict) and "inference_latency_ms" in tele:
        return tele["inference_latency_ms"]
    timings = getattr(result, "timings", None)
    if timings is not None and getattr(timings, "decode_ms", None) is not None:
        return round((timings.prefill_ms or 0.0) + timings.decode_ms, 2)
    processing = getattr(result, "processing_ms", None)
    return round(processing, 2) if processing else None
