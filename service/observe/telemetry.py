"""hypnos_telemetry (spec section 5) and end-to-end latency percentiles per route."""
from __future__ import annotations

import bisect
from dataclasses import asdict

from hypnos.engines.records import ChatTimings
from hypnos.service.scheduling.lease import Lease

# Histogram bucket upper bounds in ms (percentiles are reported as bucket upper bounds).
BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000,
              300000, 900000, float("inf"))


class LatencyBook:
    def __init__(self):
        self.routes: dict[str, list[int]] = {}

    def record(self, route: str, ms: float) -> None:
        counts = self.routes.setdefault(route, [0] * len(BUCKETS_MS))
        counts[bisect.bisect_left(BUCKETS_MS, ms)] += 1

    @staticmethod
    def _quantile(counts: list[int], q: float) -> float | None:
        total = sum(counts)
        if not total:
            return None
        rank, seen = q * total, 0
        for bound, n in zip(BUCKETS_MS, counts, strict=True):
            seen += n
            if seen >= rank:
                return bound if bound != float("inf") else BUCKETS_MS[-2]
        return None

    def snapshot(self) -> dict:
        out = {}
        for route, counts in sorted(self.routes.items()):
            out[route] = {"count": sum(counts), "p50": self._quantile(counts, 0.5),
                          "p95": self._quantile(counts, 0.95),
                          "p99": self._quantile(counts, 0.99)}
        return out


def engine_timings(t: ChatTimings) -> dict:
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in asdict(t).items()}


def telemetry(lease: Lease, placement: dict, inference_ms: float, engine: dict) -> dict:
    out = {
        "previous_tier": str(lease.previous_tier),
        "placement": placement,
        "tier_switch_latency_ms": round(lease.tier_switch_ms, 2),
        "inference_latency_ms": round(inference_ms, 2),
        "evicted_models": list(lease.evicted),
        "engine": engine,
    }
    if lease.phases is not None:
        p = lease.phases
        out["tier_switch_phases"] = {
            "load_mode": p.load_mode, "weights_ms": round(p.weights_ms, 2),
            "projector_ms": round(p.projector_ms, 2), "context_ms": round(p.context_ms, 2),
            "total_ms": round(p.total_ms, 2)}
        if p.kv_restored_tokens is not None:
            out["tier_switch_phases"]["kv_restore_ms"] = round(p.kv_restore_ms or 0.0, 2)
            out["tier_switch_phases"]["kv_restored_tokens"] = p.kv_restored_tokens
    return out


def telemetry_headers(lease: Lease, placement: dict, inference_ms: float | None = None,
                      audio_secs: float | None = None) -> dict:
    """The same facts as x-hypnos-* headers (speech responses)."""
    headers = {"x-hypnos-previous-tier": str(lease.previous_tier),
               "x-hypnos-gpu-layers": str(placement.get("gpu_layers", 0)),
               "x-hypnos-switch-ms": f"{lease.tier_switch_ms:.1f}"}
    if inference_ms is not None:
        headers["x-hypnos-inference-ms"] = f"{inference_ms:.1f}"
    if audio_secs:
        headers["x-hypnos-audio-secs"] = f"{audio_secs:.3f}"
        headers["x-hypnos-rtf"] = f"{inference_ms / 1000 / audio_secs:.4f}"
    return headers


def wait_headers(lease: Lease) -> dict:
    """x-hypnos-estimated-wait-ms: the estimate made when the request arrived (absent before
    the model has served anything while busy)."""
    if lease.estimated_wait_ms is None:
        return {}
    return {"x-hypnos-estimated-wait-ms": f"{lease.estimated_wait_ms:.0f}"}
