"""The Prometheus families behind GET /metrics (spec section 16). One registry per app, no
global state.

Counters are fed as things happen (`request_done` once a response is complete, `chat` per
chat result, the scheduler's effects); gauges of the pool, the tiers and the GPU are read at
scrape time in `render`. Per-model gauges are rebuilt on every scrape so a model removed
from the pool leaves no stale series. The image and document families are declared for
dashboards; this version has no image or document route to feed them yet.
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hypnos.planner.types import Tier
from hypnos.service.observe.record import RequestRecord

TIER_NUMBER = {Tier.GPU: 1, Tier.RAM: 2, Tier.SSD: 3}
GPU_FIELDS = (("utilization_percent", "GPU utilisation (percent)"),
              ("temperature_celsius", "GPU temperature (Celsius)"),
              ("power_watts", "GPU power draw (W)"),
              ("sm_clock_mhz", "GPU SM clock (MHz)"))


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.started = time.time()
        self._peaks: dict[str, float] = {}

        def counter(name, doc, labels=()):
            return Counter(name, doc, list(labels), registry=r)

        def gauge(name, doc, labels=()):
            return Gauge(name, doc, list(labels), registry=r)

        self.http_requests = counter("hypnos_http_requests_total", "HTTP requests by route "
                                     "and status class", ["route", "class"])
        self.http_latency_sum = gauge("hypnos_http_request_latency_ms_sum",
                                      "Sum of end-to-end latencies per route (ms)", ["route"])
        self.http_latency_max = gauge("hypnos_http_request_latency_ms_max",
                                      "Longest end-to-end latency per route (ms)", ["route"])
        self.promotions = counter("hypnos_scheduler_promotions_total",
                                  "Models loaded into tier 1")
        self.evictions = counter("hypnos_scheduler_evictions_total",
                                 "Models demoted to make room")
        self.load_failures = counter("hypnos_scheduler_load_failures_total", "Loads that failed")
        self.model_load_failures = counter("hypnos_model_load_failures_total",
                                           "Loads that failed, per model", ["model"])
        self.rejected = counter("hypnos_scheduler_admissions_rejected_total",
                                "Requests refused by the scheduler (429/503/507)")
        self.prefix_hits = counter("hypnos_prefix_cache_hits_total",
                                   "Chat requests that reused cached prompt tokens")
        self.prefix_misses = counter("hypnos_prefix_cache_misses_total",
                                     "Chat requests that prefilled the whole prompt")
        self.prefix_tokens = counter("hypnos_prefix_cache_tokens_reused_total",
                                     "Prompt tokens served from a slot's KV cache")
        self.ttft = Histogram("hypnos_chat_ttft_ms", "Chat time to first token (ms)",
                              ["model"], registry=r,
                              buckets=(25, 50, 100, 250, 500, 1000, 2500, 5000, 10000))
        self.decode_tps = gauge("hypnos_chat_decode_tokens_per_s",
                                "Decode speed of the last chat request", ["model"])
        self.prefill_tps = gauge("hypnos_chat_prefill_tokens_per_s",
                                 "Prefill speed of the last chat request", ["model"])
        self.spec_drafted = counter("hypnos_speculative_drafted_tokens_total",
                                    "Draft tokens the target checked (speculative decoding)",
                                    ["model", "method"])
        self.spec_accepted = counter("hypnos_speculative_accepted_tokens_total",
                                     "Draft tokens the target accepted", ["model", "method"])
        self.tts_rtf = gauge("hypnos_tts_rtf", "Speech: request seconds per audio second of "
                             "the last request", ["model"])
        self.tts_ttfa = gauge("hypnos_tts_ttfa_ms", "Speech: engine start to first audio of "
                              "the last request (ms)", ["model"])
        self.stt_rtf = gauge("hypnos_stt_rtf", "Transcription: processing seconds per audio "
                             "second of the last request", ["model"])
        self.image_jct = gauge("hypnos_image_jct_s", "Images: job completion time of the last "
                               "request (s)", ["model"])
        self.doc_ms_per_page = gauge("hypnos_document_ms_per_page", "Documents: ms per page "
                                     "of the last conversion", ["model"])
        self.doc_pages = counter("hypnos_document_pages_total", "Document pages converted",
                                 ["model"])
        self.model_tier = gauge("hypnos_model_tier", "Current tier (1, 2 or 3)", ["model"])
        self.model_gpu_layers = gauge("hypnos_model_gpu_layers", "Layers resident on the GPU",
                                      ["model"])
        self.model_leases = gauge("hypnos_model_active_leases", "Requests holding the model",
                                  ["model"])
        self.model_requests = gauge("hypnos_model_requests_total", "Requests served",
                                    ["model"])
        self.model_bytes = gauge("hypnos_model_resident_bytes", "Bytes a model holds in its "
                                 "current tier (tier 3: its weights on disk)", ["model", "tier"])
        self.tier_models = gauge("hypnos_tier_models", "Models whose current tier this is",
                                 ["tier"])
        self.vram = gauge("hypnos_vram_bytes", "Tier 1: budget, booked and free bytes",
                          ["kind"])
        self.pinned = gauge("hypnos_pinned_ram_bytes", "Tier 2: budget, booked and free bytes",
                            ["kind"])
        self.gpu = {f: gauge(f"hypnos_gpu_{f}", doc) for f, doc in GPU_FIELDS}
        self.gpu_memory = gauge("hypnos_gpu_memory_bytes", "Device memory as NVML reports it",
                                ["kind"])
        self.key_requests = counter("hypnos_api_key_requests_total",
                                    "Requests admitted per API key (label)", ["key"])
        self.key_rejections = counter("hypnos_api_key_rejections_total",
                                      "Requests refused by a per-key limit (429)", ["key"])
        self.key_tokens = counter("hypnos_api_key_tokens_total",
                                  "Prompt plus completion tokens charged per key", ["key"])
        self.key_tokens_today = gauge("hypnos_api_key_tokens_today",
                                      "Tokens charged per key on the current UTC day", ["key"])
        self.cache_entries = gauge("hypnos_prompt_cache_entries",
                                   "Prompt cache entries per model and tier", ["model", "tier"])
        self.cache_bytes = gauge("hypnos_prompt_cache_bytes",
                                 "Prompt cache bytes per model and tier", ["model", "tier"])
        self.cache_hits = gauge("hypnos_prompt_cache_hits", "Prompts restored from the prompt "
                                "cache since start, per model and tier", ["model", "tier"])
        self.cache_tokens = gauge("hypnos_prompt_cache_tokens", "Prompt tokens restored from "
                                  "the prompt cache since start, per model and tier",
                                  ["model", "tier"])
        self.cache_misses = gauge("hypnos_prompt_cache_misses", "Prompts neither their slot "
                                  "nor the prompt cache held a prefix of, since start",
                                  ["model"])
        self.uptime = gauge("hypnos_uptime_seconds", "Seconds since start")
        self.start_time = gauge("hypnos_process_start_time_seconds", "Start (unix time)")
        self.start_time.set(self.started)

    # ------------------------------------------------------------------ fed as it happens

    def chat(self, model_id: str, timings) -> None:
        if timings.cached_tokens:
            self.prefix_hits.inc()
            self.prefix_tokens.inc(timings.cached_tokens)
        else:
            self.prefix_misses.inc()
        if timings.ttft_ms:
            self.ttft.labels(model_id).observe(timings.ttft_ms)
        if timings.decode_tokens_per_s:
            self.decode_tps.labels(model_id).set(timings.decode_tokens_per_s)
        if timings.prefill_tokens_per_s:
            self.prefill_tps.labels(model_id).set(timings.prefill_tokens_per_s)

    def speculative(self, model_id: str, spec: dict | None) -> None:
        """One chat result's drafting ({method, drafted, accepted, n_max}, or None)."""
        if spec:
            self.spec_drafted.labels(model_id, spec["method"]).inc(spec["drafted"])
            self.spec_accepted.labels(model_id, spec["method"]).inc(spec["accepted"])

    def request_done(self, record: RequestRecord, route: str, ms: float) -> None:
        """Once a response is complete (streams: after the last byte)."""
        status = record.status
        self.http_requests.labels(route, f"{status // 100}xx").inc()
        self.http_latency_sum.labels(route).inc(ms)
        if ms > self._peaks.get(route, -1.0):
            self._peaks[route] = ms
            self.http_latency_max.labels(route).set(ms)
        lease = record.lease
        if lease is None or status >= 400:
            return
        model = lease.model.id
        if record.audio_secs:                                # speech
            self.tts_rtf.labels(model).set(ms / 1000 / record.audio_secs)
        if record.ttfa_ms:
            self.tts_ttfa.labels(model).set(record.ttfa_ms)
        if record.transcribed_secs and record.engine_ms:     # transcription
            self.stt_rtf.labels(model).set(record.engine_ms / 1000 / record.transcribed_secs)

    # ------------------------------------------------------------------ read at scrape time

    def render(self, scheduler, limiter=None, keys=(), gpu_sample=None) -> bytes:
        self.uptime.set(time.time() - self.started)
        for key in keys:
            self.key_tokens_today.labels(key.label).set(limiter.quotas.used(key.label))
        per_model = (self.model_tier, self.model_gpu_layers, self.model_leases,
                     self.model_requests, self.model_bytes)
        for g in per_model:
            g.clear()
        counts = {t: 0 for t in Tier}
        for st in scheduler.models.values():
            counts[st.tier] += 1
            self.model_tier.labels(st.id).set(TIER_NUMBER[st.tier])
            self.model_gpu_layers.labels(st.id).set(st.placement.gpu_layers
                                                    if st.placement else 0)
            self.model_leases.labels(st.id).set(st.leases + st.holds)
            self.model_requests.labels(st.id).set(st.stats.served)
            held = (st.placement.booked_tier1_bytes if st.tier is Tier.GPU and st.placement
                    else st.pinned.bytes if st.pinned is not None else st.weight_bytes)
            self.model_bytes.labels(st.id, str(st.tier)).set(held)
        for tier, n in counts.items():
            self.tier_models.labels(str(tier)).set(n)
        b = scheduler.budgets
        booked1, booked2 = scheduler.tier1_booked(), scheduler.tier2_booked()
        for gauge, budget, booked in ((self.vram, b.tier1_bytes, booked1),
                                      (self.pinned, b.tier2_bytes, booked2)):
            gauge.labels("budget").set(budget)
            gauge.labels("booked").set(booked)
            gauge.labels("free").set(budget - booked)
        self._prompt_cache(scheduler.prompt_cache)
        if gpu_sample is not None:
            self.gpu_memory.labels("total").set(gpu_sample.total)
            self.gpu_memory.labels("free").set(gpu_sample.free)
            for name, g in self.gpu.items():
                if name in gpu_sample.stats:
                    g.set(gpu_sample.stats[name])
        return generate_latest(self.registry)

    def _prompt_cache(self, cache) -> None:
        """The prompt cache's entries, bytes, hits and misses per model and tier."""
        families = (self.cache_entries, self.cache_bytes, self.cache_hits, self.cache_tokens,
                    self.cache_misses)
        for g in families:
            g.clear()
        if cache is None:
            return
        for row in cache.snapshot()["models"]:
            model = row["model"]
            self.cache_misses.labels(model).set(row["misses"])
            for tier in ("ram", "disk"):
                t = row[tier]
                self.cache_entries.labels(model, tier).set(t["entries"])
                self.cache_bytes.labels(model, tier).set(t["bytes"])
                self.cache_hits.labels(model, tier).set(t["hits"])
                self.cache_tokens.labels(model, tier).set(t["tokens"])
