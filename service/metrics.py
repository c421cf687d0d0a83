"""GET /metrics: Prometheus text (spec section 16). One registry per app, no global state.

This covers the families the server already measures (HTTP requests, scheduler actions,
prefix reuse, chat speed, per-model state); the rest of section 16 comes with the features
that measure it.
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from sanic import Blueprint, Request
from sanic.response import raw

from hypnos.planner.types import Tier

bp = Blueprint("metrics")
TIER_NUMBER = {Tier.GPU: 1, Tier.RAM: 2, Tier.SSD: 3}


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.started = time.time()
        self.http_requests = Counter("hypnos_http_requests_total", "HTTP requests by route "
                                     "and status class", ["route", "class"], registry=r)
        self.promotions = Counter("hypnos_scheduler_promotions_total",
                                  "Models loaded into tier 1", registry=r)
        self.evictions = Counter("hypnos_scheduler_evictions_total",
                                 "Models demoted to make room", registry=r)
        self.load_failures = Counter("hypnos_scheduler_load_failures_total",
                                     "Loads that failed", registry=r)
        self.model_load_failures = Counter("hypnos_model_load_failures_total",
                                           "Loads that failed, per model", ["model"], registry=r)
        self.rejected = Counter("hypnos_scheduler_admissions_rejected_total",
                                "Requests refused by the scheduler (429/503/507)", registry=r)
        self.prefix_hits = Counter("hypnos_prefix_cache_hits_total",
                                   "Chat requests that reused cached prompt tokens", registry=r)
        self.prefix_misses = Counter("hypnos_prefix_cache_misses_total",
                                     "Chat requests that prefilled the whole prompt", registry=r)
        self.prefix_tokens = Counter("hypnos_prefix_cache_tokens_reused_total",
                                     "Prompt tokens served from a slot's KV cache", registry=r)
        self.ttft = Histogram("hypnos_chat_ttft_ms", "Chat time to first token (ms)",
                              buckets=(25, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
                              registry=r)
        self.decode_tps = Gauge("hypnos_chat_decode_tokens_per_s",
                                "Decode speed of the last chat request", ["model"], registry=r)
        self.prefill_tps = Gauge("hypnos_chat_prefill_tokens_per_s",
                                 "Prefill speed of the last chat request", ["model"],
                                 registry=r)
        self.model_tier = Gauge("hypnos_model_tier", "Current tier (1, 2 or 3)", ["model"],
                                registry=r)
        self.model_leases = Gauge("hypnos_model_active_leases", "Requests holding the model",
                                  ["model"], registry=r)
        self.model_requests = Gauge("hypnos_model_requests_total", "Requests served",
                                    ["model"], registry=r)
        self.key_requests = Counter("hypnos_api_key_requests_total",
                                    "Requests admitted per API key (label)", ["key"], registry=r)
        self.key_rejections = Counter("hypnos_api_key_rejections_total",
                                      "Requests refused by a per-key limit (429)", ["key"],
                                      registry=r)
        self.key_tokens = Counter("hypnos_api_key_tokens_total",
                                  "Prompt plus completion tokens charged per key", ["key"],
                                  registry=r)
        self.key_tokens_today = Gauge("hypnos_api_key_tokens_today",
                                      "Tokens charged per key on the current UTC day", ["key"],
                                      registry=r)
        self.uptime = Gauge("hypnos_uptime_seconds", "Seconds since start", registry=r)
        self.start_time = Gauge("hypnos_process_start_time_seconds", "Start (unix time)",
                                registry=r)
        self.start_time.set(self.started)

    def chat(self, model_id: str, timings) -> None:
        if timings.cached_tokens:
            self.prefix_hits.inc()
            self.prefix_tokens.inc(timings.cached_tokens)
        else:
            self.prefix_misses.inc()
        if timings.ttft_ms:
            self.ttft.observe(timings.ttft_ms)
        if timings.decode_tokens_per_s:
            self.decode_tps.labels(model_id).set(timings.decode_tokens_per_s)
        if timings.prefill_tokens_per_s:
            self.prefill_tps.labels(model_id).set(timings.prefill_tokens_per_s)

    def render(self, scheduler, limiter=None, keys=()) -> bytes:
        self.uptime.set(time.time() - self.started)
        for key in keys:
            self.key_tokens_today.labels(key.label).set(limiter.quotas.used(key.label))
        for st in scheduler.models.values():
            self.model_tier.labels(st.id).set(TIER_NUMBER[st.tier])
            self.model_leases.labels(st.id).set(st.leases)
            self.model_requests.labels(st.id).set(st.stats.served)
        return generate_latest(self.registry)


@bp.get("/metrics")
async def metrics(request: Request):
    ctx = request.app.ctx
    body = ctx.metrics.render(ctx.scheduler, ctx.limiter, ctx.keys.keys)
    return raw(body, content_type="text/plain; version=0.0.4; charset=utf-8")
