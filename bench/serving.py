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


def _complete(http: httpx.Client, model: str, max_tokens: int, content: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0}
    r = http.post("/v1/chat/completions", json=body)
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"]


def _first_token_after_move(t: Target, http: httpx.Client, tier: str | None
                            ) -> tuple[float, float]:
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


def wav_seconds(data: bytes) -> float:
    with wave.open(io.BytesIO(data)) as w:
        return w.getnframes() / w.getframerate()


def speak(t: Target, http: httpx.Client) -> bytes:
    """A WAV of PASSAGE from the target's speech model (audio for transcription)."""
    r = http.post("/v1/audio/speech", json={"model": t.models["text_to_speech"],
                                            "input": PASSAGE, "response_format": "wav"})
    r.raise_for_status()
    return r.content


# ----------------------------------------------------------------- one run of each section
# A sample function makes one measured run and returns {figure: value}; ``warm`` runs once
# before (loads the model, fills the prompt cache) and is not measured.

def warm_chat(t: Target, o: Options, http: httpx.Client) -> None:
    _stream_chat(http, t.models["text_generation"], 4)


def sample_chat(t: Target, o: Options, http: httpx.Client) -> dict[str, float]:
    first, decode, tokens = _stream_chat(http, t.models["text_generation"], o.max_tokens)
    out = {"ttft_ms": first * 1000}
    if tokens > 1 and decode > 0:
        out["decode_tok_s"] = (tokens - 1) / decode
    return out


def sample_concurrency(t: Target, o: Options, http: httpx.Client) -> dict[str, float]:
    """Each level sends that many different prompts at once: completion tokens / (first
    send to last answer)."""
    model, out = t.models["text_generation"], {}
    for level in o.concurrency:
        prompts = [f"{PROMPT[0]['content']} Story number {i + 1}." for i in range(level)]
        with ThreadPoolExecutor(level) as pool:
            started = time.perf_counter()
            tokens = sum(pool.map(lambda p: _complete(http, model, o.max_tokens, p), prompts))
            out[f"c{level}"] = tokens / (time.perf_counter() - started)
    return out


def sample_tier(t: Target, o: Options, http: httpx.Client) -> dict[str, float]:
    """Cold (from tier 3), warm (from tier 2), resident (tier 1). Tier 3 reads may still hit
    the OS page cache: the server's files are not ours to evict."""
    out = {}
    for name, tier in (("cold_tier3", "tier3_nvme_ssd"), ("warm_tier2", "tier2_pinned_ram"),
                       ("resident_tier1", None)):
        out[f"{name}_ms"], out[f"{name}_switch_ms"] = _first_token_after_move(t, http, tier)
    return out


def _embed_texts(o: Options) -> list[str]:
    return [f"{PASSAGE} Sentence {i}." for i in range(o.embed_batch)]


def warm_embeddings(t: Target, o: Options, http: httpx.Client) -> None:
    http.post("/v1/embeddings", json={"model": t.models["embeddings"], "input": "warm"}
              ).raise_for_status()


def sample_embeddings(t: Target, o: Options, http: httpx.Client) -> dict[str, float]:
    texts = _embed_texts(o)
    started = time.perf_counter()
    http.post("/v1/embeddings", json={"model": t.models["embeddings"], "input": texts}
              ).raise_for_status()
    return {"texts_per_s": len(texts) / (time.perf_counter() - started)}


def sample_transcription(t: Target, o: Options, http: httpx.Client) -> dict[str, float]:
    started = time.perf_counter()
    r = http.post("/v1/audio/transcriptions", data={"model": t.models["speech_to_text"]},
                  files={"file": ("clip.wav", o.audio, "audio/wav")})
    r.raise_for_status()
    return {"rtf": (time.perf_counter() - started) / wav_seconds(o.audio)}


def sample_speech(t: Target, o: Options, http: httpx.Client) -> dict[str, float]:
    body = {"model": t.models["text_to_speech"], "input": PASSAGE, "stream": True,
            "response_format": "pcm"}
    started = time.perf_counter()
    with http.stream("POST", "/v1/audio/speech", json=body) as r:
        r.raise_for_status()
        for chunk in r.iter_raw():
            if chunk:
                return {"ttfa_ms": (time.perf_counter() - started) * 1000}
    raise RuntimeError("the speech stream carried no audio")


# ----------------------------------------------------------------------------- summaries

def summarize(section: str, s: dict[str, list[float]], o: Options) -> list[Metric]:
    """The section's figures from its samples (figure -> one value per run)."""
    if section == "chat":
        out = [Metric("chat", "ttft_ms_median", "ms", median(s["ttft_ms"]), "lower"),
               Metric("chat", "ttft_ms_p95", "ms", p95(s["ttft_ms"]), "lower")]
        if s.get("decode_tok_s"):
            out += [Metric("chat", "decode_tok_s_median", "tok/s", median(s["decode_tok_s"]),
                           "higher"),
                    Metric("chat", "decode_tok_s_p95", "tok/s", p95(s["decode_tok_s"]),
                           "higher", "95th percentile of the runs' rates")]
        return out
    if section == "concurrency":
        return [Metric("concurrency", f"c{n}_tok_s", "tok/s", median(s[f"c{n}"]), "higher",
                       f"{n} at once, median of {len(s[f'c{n}'])}") for n in o.concurrency]
    if section == "tier":
        return [Metric("tier", f"{name}_ms", "ms", median(s[f"{name}_ms"]), "lower",
                       f"server tier switch {median(s[f'{name}_switch_ms']):.0f} ms")
                for name in ("cold_tier3", "warm_tier2", "resident_tier1")]
    if section == "embeddings":
        return [Metric("embeddings", "texts_per_s_median", "texts/s", median(s["texts_per_s"]),
                       "higher", f"batches of {o.embed_batch}")]
    if section == "transcription":
        return [Metric("transcription", "rtf_median", "x", median(s["rtf"]), "lower",
                       f"{wav_seconds(o.audio):.1f} s of audio")]
    return [Metric("speech", "ttfa_ms_median", "ms", median(s["ttfa_ms"]), "lower"),
            Metric("speech", "ttfa_ms_p95", "ms", p95(s["ttfa_ms"]), "lower")]


SAMPLERS = {"chat": sample_chat, "concurrency": sample_concurrency, "tier": sample_tier,
            "embeddings": sample_embeddings, "transcription": sample_transcription,
            "speech": sample_speech}
WARMERS = {"chat": warm_chat, "concurrency": warm_chat, "embeddings": warm_embeddings,
           "transcription": sample_transcription, "speech": sample_speech}


def skip_reason(t: Target, section: str, o: Options) -> str | None:
    if section == "tier" and not t.hypnos:
        return "not a Hypnos server"
    if MODALITY_OF[section] not in t.models:
        return f"no {MODALITY_OF[section]} model"
    if section == "transcription" and o.audio is None:
        return "no audio: give --audio or serve a speech model"
    return None


def run(targets: list[Target], o: Options, progress=lambda text: None) -> list[Target]:
    """Measure every target. Within a section the targets take turns run by run, so a load
    change on the machine falls on all of them alike. A failing section is recorded in
    ``target.errors`` and the rest goes on; one that does not apply in ``target.skipped``."""
    for t in targets:
        discover(t, o.models, o.timeout)
    if "transcription" in o.sections and o.audio is None:
        speaker = next((t for t in targets if "text_to_speech" in t.models), None)
        if speaker is not None:
            progress(f"{speaker.url}: speaking the transcription clip")
            with speaker.http(o.timeout) as http:
                o.audio = speak(speaker, http)
    for section in o.sections:
        active = []
        for t in targets:
            reason = skip_reason(t, section, o)
            if reason:
                t.skipped[section] = reason
            else:
                active.append(t)
        _run_section(section, active, o, progress)
    return targets


def _run_section(section: str, targets: list[Target], o: Options, progress) -> None:
    samples: dict[int, dict[str, list[float]]] = {id(t): {} for t in targets}

    def attempt(t: Target, step) -> None:
        if section in t.errors:
            return
        try:
            with t.http(o.timeout) as http:
                step(t, http)
        except (httpx.HTTPError, RuntimeError, KeyError, ValueError) as exc:
            t.errors[section] = _describe(exc)

    def measure(t: Target, http: httpx.Client) -> None:
        for name, value in SAMPLERS[section](t, o, http).items():
            samples[id(t)].setdefault(name, []).append(value)
    for t in targets:
        if section in WARMERS:
            progress(f"{t.url}: {section}, warming up")
            attempt(t, lambda t, http: WARMERS[section](t, o, http))
    for i in range(o.runs):
        for t in targets:
            progress(f"{t.url}: {section}, run {i + 1} of {o.runs}")
            attempt(t, measure)
    for t in targets:
        if section not in t.errors:
            t.metrics += summarize(section, samples[id(t)], o)


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        try:
            return f"{exc.response.status_code}: {exc.response.json()['error']['message']}"
        except (ValueError, KeyError, TypeError):
            return f"{exc.response.status_code}: {exc.response.text[:200]}"
    return f"{type(exc).__name__}: {exc}"


def ratios(a: Target, b: Target) -> dict[str, float]:
    """b / a for every figure both measured (each Metric says which way is better)."""
    mine = {m.key: m.value for m in a.metrics}
    return {m.key: m.value / mine[m.key] for m in b.metrics
            if mine.get(m.key) and m.value is not None}
