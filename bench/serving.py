"""Measure a running server over HTTP: Hypnos or any OpenAI-compatible base URL.

The measuring half of ``hypnos bench`` (the CLI only parses and renders). Every figure is
taken on the client side, from request sent to bytes received, so two servers are measured
the same way; when the server is Hypnos its telemetry is kept beside the figure.

Sections (each skipped when the server has no model for it):
  chat           streamed chat: time to first token and decode tokens/s over N runs
                 (median, p95)
  concurrency    1, 2, 4, 8 requests at once: aggregate completion tokens/s
  tier           Hypnos only: first-token time after moving the chat model to tier 3 (cold),
                 to tier 2 (warm) and with it resident (tier 1)
  embeddings     texts/s over N runs of one batch
  transcription  real-time factor (client seconds / audio seconds); the audio is --audio or
                 a passage the server's speech model speaks first
  speech         streamed time to first audio bytes

Calls block; each request has ``timeout`` seconds (a cold load can take long).
"""
from __future__ import annotations

import io
import json
import math
import statistics
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

SECTIONS = ("chat", "concurrency", "tier", "embeddings", "transcription", "speech")
MODALITY_OF = {"chat": "text_generation", "concurrency": "text_generation",
               "tier": "text_generation", "embeddings": "embeddings",
               "transcription": "speech_to_text", "speech": "text_to_speech"}
PROMPT = [{"role": "user", "content": "Write a long story about a fox who learns to sail."}]
PASSAGE = ("Hypnos keeps every model in the right memory tier. A voice turn starts with a "
           "transcription, goes on with a chat answer, and ends with speech.")


@dataclass
class Options:
    runs: int = 5
    max_tokens: int = 64
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    embed_batch: int = 32
    sections: tuple[str, ...] = SECTIONS
    models: dict[str, str] = field(default_factory=dict)    # modality -> model id
    audio: bytes | None = None                                # a WAV for transcription
    timeout: float = 900.0


@dataclass
class Metric:
    section: str
    name: str
    unit: str
    value: float | None
    better: str                      # "lower" or "higher": which way a ratio is good
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"


@dataclass
class Target:
    """One server under test."""
    url: str
    api_key: str | None = None
    hypnos: bool = False
    models: dict[str, str] = field(default_factory=dict)    # modality -> model id
    metrics: list[Metric] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)    # section -> what failed
    skipped: dict[str, str] = field(default_factory=dict)   # section -> why not run

    def http(self, timeout: float) -> httpx.Client:
        """A client opening a new connection per request: llama.cpp's llama-server drops a
        kept-alive connection after a stream now and then (RemoteProtocolError on the next
        request), and a fresh loopback connection costs both servers the same."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.url.rstrip("/"), headers=headers, timeout=timeout,
                            limits=httpx.Limits(max_keepalive_connections=0))

    def to_dict(self) -> dict:
        return {"url": self.url, "server": "hypnos" if self.hypnos else "openai-compatible",
                "models": self.models, "errors": self.errors, "skipped": self.skipped,
                "metrics": {m.key: {"value": m.value, "unit": m.unit, "better": m.better,
                                    **({"note": m.note} if m.note else {})}
                            for m in self.metrics}}


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def p95(xs: list[float]) -> float:
    """Nearest-rank 95th percentile: with fewer than 20 runs it is the largest."""
    ordered = sorted(xs)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def discover(target: Target, overrides: dict[str, str], timeout: float) -> None:
    """Whether the server is Hypnos (GET /health says so), and a model per modality: the
    overrides first, then Hypnos's pool by modality; another server's first model is taken
    for chat only."""
    with target.http(timeout) as http:
        try:
            target.hypnos = http.get("/health").json().get("service") == "hypnos"
        except (httpx.HTTPError, ValueError, AttributeError):
            target.hypnos = False
        found: dict[str, str] = {}
        if target.hypnos:
            for m in http.get("/v1/memory/status").raise_for_status().json()["models"]:
                if m.get("enabled", True) and not m.get("problem"):
                    for modality in m.get("modalities") or [m["modality"]]:
                        found.setdefault(modality, m["id"])
        else:
            data = http.get("/v1/models").raise_for_status().json().get("data", [])
            if data:
                found["text_generation"] = data[0]["id"]
    target.models = {**found, **overrides}


def _stream_chat(http: httpx.Client, model: str, max_tokens: int) -> tuple[float, float, int]:
    """(seconds to the first token, seconds from the first to the last token, tokens) of one
    streamed chat; tokens from the final usage when the server sends it, else chunks."""
    body = {"model": model, "messages": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = last = None
    chunks, usage = 0, None
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            event = json.loads(line[5:])
            usage = event.get("usage") or usage
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    chunks += 1
    if first is None:
        raise RuntimeError(f"{model} streamed no token")
    tokens = (usage or {}).get("completion_tokens") or chunks
    return first - started, last - first, tokens


def bench_chat(t: Target, o: Options, http: httpx.Client) -> list[Metric]:
    model = t.models["text_generation"]
    _stream_chat(http, model, 4)                    # loads the model, warms the prompt cache
    ttft, rate = [], []
    for _ in range(o.runs):
        first, decode, tokens = _stream_chat(http, model, o.max_tokens)
        ttft.append(first * 1000)
        if tokens > 1 and decode > 0:
            rate.append((tokens - 1) / decode)
    out = [Metric("chat", "ttft_ms_median", "ms", median(ttft), "lower"),
           Metric("chat", "ttft_ms_p95", "ms", p95(ttft), "lower")]
    if rate:
        out += [Metric("chat", "decode_tok_s_median", "tok/s", median(rate), "higher"),
                Metric("chat", "decode_tok_s_p95", "tok/s", p95(rate), "higher",
                       "95th percentile of the runs' rates")]
    return out


def _complete(http: httpx.Client, model: str, max_tokens: int, content: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0}
    r = http.post("/v1/chat/completions", json=body)
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"]


def bench_concurrency(t: Target, o: Options, http: httpx.Client) -> list[Metric]:
    """Each level sends that many different prompts at once, ``runs`` times; the median of
    completion tokens / (first send to last answer)."""
    model = t.models["text_generation"]
    out = []
    for level in o.concurrency:
        prompts = [f"{PROMPT[0]['content']} Story number {i + 1}." for i in range(level)]
        rates = []
        with ThreadPoolExecutor(level) as pool:
            for _ in range(o.runs):
                started = time.perf_counter()
                tokens = sum(pool.map(lambda p: _complete(http, model, o.max_tokens, p),
                                      prompts))
                rates.append(tokens / (time.perf_counter() - started))
        out.append(Metric("concurrency", f"c{level}_tok_s", "tok/s", median(rates), "higher",
                          f"{level} at once, median of {o.runs}"))
    return out


def _first_token_after_move(t: Target, http: httpx.Client, tier: str | None) -> tuple[float, float]:
    """(client ms to the first token, server tier_switch ms) of a 1-token request after
    POST /v1/memory/tier moved the chat model to ``tier`` (None: leave it where it is)."""
    model = t.models["text_generation"]
    if tier is not None:
        http.post("/v1/memory/tier", json={"model": model, "target_tier": tier}
                  ).raise_for_status()
    body = {"model": model, "messages": PROMPT, "max_tokens": 1, "temperature": 0}
    started = time.perf_counter()
    r = http.post("/v1/chat/completions", json=body)
    r.raise_for_status()
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, r.json().get("hypnos_telemetry", {}).get("tier_switch_latency_ms", 0.0)


def bench_tier(t: Target, o: Options, http: httpx.Client) -> list[Metric]:
    """Medians over runs of: cold (tier 3), warm (tier 2), resident (tier 1). Tier 3 reads
    may still hit the OS page cache: the server's file is not ours to evict."""
    rows = {"cold_tier3": "tier3_nvme_ssd", "warm_tier2": "tier2_pinned_ram",
            "resident_tier1": None}
    out = []
    for name, tier in rows.items():
        samples = [_first_token_after_move(t, http, tier) for _ in range(o.runs)]
        out.append(Metric("tier", f"{name}_ms", "ms", median([s[0] for s in samples]), "lower",
                          f"server tier switch {median([s[1] for s in samples]):.0f} ms"))
    return out


def bench_embeddings(t: Target, o: Options, http: httpx.Client) -> list[Metric]:
    model = t.models["embeddings"]
    texts = [f"{PASSAGE} Sentence {i}." for i in range(o.embed_batch)]
    http.post("/v1/embeddings", json={"model": model, "input": texts[:1]}).raise_for_status()
    rates = []
    for _ in range(o.runs):
        started = time.perf_counter()
        http.post("/v1/embeddings", json={"model": model, "input": texts}).raise_for_status()
        rates.append(len(texts) / (time.perf_counter() - started))
    return [Metric("embeddings", "texts_per_s_median", "texts/s", median(rates), "higher",
                   f"batches of {len(texts)}")]


def wav_seconds(data: bytes) -> float:
    with wave.open(io.BytesIO(data)) as w:
        return w.getnframes() / w.getframerate()


def speak(t: Target, http: httpx.Client) -> bytes:
    """A WAV of PASSAGE from the target's speech model (audio for transcription)."""
    r = http.post("/v1/audio/speech", json={"model": t.models["text_to_speech"],
                                            "input": PASSAGE, "response_format": "wav"})
    r.raise_for_status()
    return r.content


def bench_transcription(t: Target, o: Options, http: httpx.Client) -> list[Metric]:
    model = t.models["speech_to_text"]
    secs = wav_seconds(o.audio)

    def once() -> float:
        started = time.perf_counter()
        r = http.post("/v1/audio/transcriptions", data={"model": model},
                      files={"file": ("clip.wav", o.audio, "audio/wav")})
        r.raise_for_status()
        return time.perf_counter() - started
    once()
    rtf = [once() / secs for _ in range(o.runs)]
    return [Metric("transcription", "rtf_median", "x", median(rtf), "lower",
                   f"{secs:.1f} s of audio")]


def bench_speech(t: Target, o: Options, http: httpx.Client) -> list[Metric]:
    body = {"model": t.models["text_to_speech"], "input": PASSAGE, "stream": True,
            "response_format": "pcm"}

    def once() -> float:
        started = time.perf_counter()
        with http.stream("POST", "/v1/audio/speech", json=body) as r:
            r.raise_for_status()
            for chunk in r.iter_raw():
                if chunk:
                    return (time.perf_counter() - started) * 1000
        raise RuntimeError("the speech stream carried no audio")
    once()
    ttfa = [once() for _ in range(o.runs)]
    return [Metric("speech", "ttfa_ms_median", "ms", median(ttfa), "lower"),
            Metric("speech", "ttfa_ms_p95", "ms", p95(ttfa), "lower")]


RUNNERS = {"chat": bench_chat, "concurrency": bench_concurrency, "tier": bench_tier,
           "embeddings": bench_embeddings, "transcription": bench_transcription,
           "speech": bench_speech}


def skip_reason(t: Target, section: str, o: Options) -> str | None:
    if section == "tier" and not t.hypnos:
        return "not a Hypnos server"
    if MODALITY_OF[section] not in t.models:
        return f"no {MODALITY_OF[section]} model"
    if section == "transcription" and o.audio is None:
        return "no audio: give --audio or serve a speech model"
    return None


def run(targets: list[Target], o: Options, progress=lambda text: None) -> list[Target]:
    """Measure every target, section by section (targets take turns within a section, so a
    load change on the machine falls on all of them). A failing section is recorded in
    ``target.errors`` and the rest goes on; one that does not apply in ``target.skipped``."""
    for t in targets:
        discover(t, o.models, o.timeout)
    if "transcription" in o.sections and o.audio is None:
        for t in targets:
            if "text_to_speech" in t.models:
                progress(f"{t.url}: speaking the transcription clip")
                with t.http(o.timeout) as http:
                    o.audio = speak(t, http)
                break
    for section in o.sections:
        for t in targets:
            reason = skip_reason(t, section, o)
            if reason:
                t.skipped[section] = reason
                continue
            progress(f"{t.url}: {section}")
            try:
                with t.http(o.timeout) as http:
                    t.metrics += RUNNERS[section](t, o, http)
            except (httpx.HTTPError, RuntimeError, KeyError, ValueError) as exc:
                t.errors[section] = _describe(exc)
    return targets


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        try:
            return f"{exc.response.status_code}: {exc.response.json()['error']['message']}"
        except (ValueError, KeyError, TypeError):
            return f"{exc.response.status_code}: {exc.response.text[:200]}"
    return f"{type(exc).__name__}: {exc}"


def ratios(a: Target, b: Target) -> dict[str, float]:
    """b / a for every metric both measured (the table says which way is better)."""
    mine = {m.key: m.value for m in a.metrics}
    return {m.key: m.value / mine[m.key] for m in b.metrics
            if mine.get(m.key) and m.value is not None}
