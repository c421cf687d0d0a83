"""The request log (spec section 15): a ring buffer of recent inference calls.

`RequestLog.observe` runs once a response is complete (streams: after the last byte) and
builds one log entry from what the request left on its `RequestRecord`: the leases it took,
what the engine call counted, the response status and, for a JSON answer, its body. Polling
(GET routes, the log routes themselves, /metrics) is not logged. The captured text (input,
output at debug; payloads at trace) is cut at `MAX_CAPTURE` characters and passed through
``request_log.redact``.

Each record is kept with its owner (`RequestRecord.owner`: the key's owner id, never the key;
"" when keys are off) and read through a viewer (`RequestRecord.owns`): a user key sees only
its own records, the admin key (and every request when keys are off) sees all. The owner is
not part of the record a reader gets.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections import deque

from hypnos.service.config.schema import RequestLogConfig
from hypnos.service.observe.record import RequestRecord

LEVELS = ("off", "error", "warn", "info", "debug", "trace")
MAX_CAPTURE = 64 * 1024
REDACTED = "[redacted]"


def record_level(status: int) -> str:
    return "error" if status >= 500 else "warn" if status >= 400 else "info"


class RequestLog:
    def __init__(self, cfg: RequestLogConfig):
        self.level = cfg.level
        # (owner, record), oldest first.
        self.records: deque[tuple[str, dict]] = deque(maxlen=cfg.capacity)
        self.redact_all = "*" in cfg.redact
        self.patterns = [re.compile(p) for p in cfg.redact if p != "*"]

    @property
    def capacity(self) -> int:
        return self.records.maxlen or 0

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

    def add(self, record: dict, owner: str = "") -> None:
        if self.captures(record["level"]):
            self.records.append((owner, record))

    def visible(self, viewer: RequestRecord | None) -> list[dict]:
        """The records ``viewer`` may read (None: all), oldest first."""
        return [r for owner, r in self.records if viewer is None or viewer.owns(owner)]

    def find(self, request_id: str, viewer: RequestRecord | None = None) -> dict | None:
        """The record of ``request_id`` when ``viewer`` may read it: another owner's record
        is None, as an unknown id is."""
        return next((r for r in self.visible(viewer) if r["id"] == request_id), None)

    def query(self, model=None, route=None, status=None, key=None, limit=None,
              viewer: RequestRecord | None = None) -> list[dict]:
        """Newest first, of what ``viewer`` may read. ``status``: ok, error, 4xx or 5xx;
        ``key``: the key's label."""
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
        out = [r for r in reversed(self.visible(viewer)) if keep(r)]
        return out[:limit] if limit is not None else out

    # ------------------------------------------------------------------ building a record

    def observe(self, request, record: RequestRecord, route: str, duration_ms: float) -> None:
        status = record.status
        level = record_level(status)
        if not self.captures(level):
            return
        body = _json(request.body) if request.body else None
        lease = record.lease
        response_body = record.response_body
        answer = _json(response_body) if response_body else None
        entry = {
            "id": record.request_id, "route": route, "method": request.method,
            "status": status,
            "key": record.api_key.label if record.api_key is not None else None,
            "started_at": dt.datetime.fromtimestamp(
                time.time() - duration_ms / 1000, dt.UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "duration_ms": round(duration_ms, 2),
            "model": lease.model.id if lease else (body or {}).get("model"),
            "stream": bool((body or {}).get("stream", False)),
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "cached_tokens": record.cached_tokens,
            "tokens_per_s": _round(record.tokens_per_s),
            "inference_ms": _inference_ms(record, answer),
            "tier_switch_ms": round(lease.tier_switch_ms, 2) if lease else None,
            "previous_tier": str(lease.previous_tier) if lease else None,
            "error": ((answer or {}).get("error") or {}).get("message")
            if status >= 400 and isinstance(answer, dict) else None,
            "level": level, "truncated": False,
        }
        if record.cached_from is not None:
            entry["cached_from"] = dict(record.cached_from)
        if record.parting is not None:
            entry["prompt_parting"] = _parting(record.parting, self.captures("debug"))
        if self.captures("debug"):
            raw = body or {}
            entry["input"] = self._text(raw.get("messages", raw.get("input")), entry)
            entry["output"] = self._text(record.output, entry)
        if self.captures("trace"):
            entry["request_payload"] = self._text(
                request.body.decode("utf-8", "replace") if request.body else None, entry)
            entry["response_payload"] = self._text(
                response_body.decode("utf-8", "replace") if response_body else None, entry)
        self.add(entry, record.owner)


def _parting(parting: dict, texts: bool) -> dict:
    """Where the prompt parted from its key's best cached prefix: the token positions at
    every level, the text on both sides only where prompts are logged (debug and trace)."""
    keep = ("best_cached_prefix", "parted_at") if not texts else tuple(parting)
    return {k: parting[k] for k in keep if k in parting}


def _json(raw: bytes):
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _round(value):
    return round(value, 2) if isinstance(value, float) else value


def _inference_ms(record: RequestRecord, answer) -> float | None:
    """The answer's own telemetry when it has it, else the engine time the call counted."""
    tele = (answer or {}).get("hypnos_telemetry") if isinstance(answer, dict) else None
    if isinstance(tele, dict) and "inference_latency_ms" in tele:
        return tele["inference_latency_ms"]
    return round(record.engine_ms, 2) if record.engine_ms is not None else None
