"""Speech synthesis (spec section 10): the phrase splitter and voice/language mapping (pure),
the Kokoro engine on the default lineup's real Kokoro-82M int8 model, POST /v1/audio/speech
through Sanic's ASGI client, and the official `openai` client against `hypnos serve`."""
import io
import struct
import sys
import threading
import time

import httpx
import numpy as np
import openai
import pytest
from sanic import Sanic

from conftest import MODELS_DIR, ROOT
from hypnos.engines.records import LoadSpec, SpeechRequest
from hypnos.engines.kokoro import (
    PAUSE_SECS, SAMPLE_RATE, KokoroSpeaker, kokoro_lang, kokoro_voice, split_phrases,
)
from hypnos.service import errors
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config
from hypnos.service.routes.speech import encode, parse_speech, wav_header

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

Sanic.test_mode = True
ONNX = "kokoro-82m/kokoro-v1.0.int8.onnx"
VOICES = "kokoro-82m/voices_ja.npz"
TEXT = "Hello from Hypnos. This is a test of speech."
PAUSE_SAMPLES = round(PAUSE_SECS * SAMPLE_RATE)
MODELS = f"""
[[models]]
id = "kokoro"
modality = "text_to_speech"
engine = "onnx_runtime"
weights_path = "{ONNX}"
voices_path = "{VOICES}"
"""
CHAT = """
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
"""


def require_kokoro() -> None:
    for rel in (ONNX, VOICES):
        if not (MODELS_DIR / rel).exists():
            pytest.fail(f"{MODELS_DIR / rel} is missing: run `./run.sh models kokoro` first")


def samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0


def rms(pcm: bytes) -> float:
    return float(np.sqrt(np.mean(samples(pcm) ** 2)))


def parse_wav(body: bytes) -> dict:
    riff, size, wave = struct.unpack("<4sI4s", body[:12])
    fmt = struct.unpack("<4sIHHIIHH", body[12:36])
    data, data_size = struct.unpack("<4sI", body[36:44])
    assert (riff, wave, fmt[0], data) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    return {"riff_size": size, "format": fmt[2], "channels": fmt[3], "rate": fmt[4],
            "bits": fmt[7], "data_size": data_size}


# ----------------------------------------------------------------------- pure

def test_split_phrases_sentences_then_commas_then_spaces():
    assert split_phrases(TEXT) == ["Hello from Hypnos.", "This is a test of speech."]
    assert split_phrases("Hi. How are you?\nFine, thanks") == ["Hi. How are you?",
                                                              "Fine, thanks"]
    assert split_phrases("Good. Ok.") == ["Good. Ok."]                  # short tail joins
    assert split_phrases("こんにちは。元気ですか？") == ["こんにちは。", "元気ですか？"]
    assert split_phrases("... --") == []
    long = ", ".join(f"clause number {i} goes here" for i in range(20)) + "."
    parts = split_phrases(long, limit=80)
    assert len(parts) > 1 and all(len(p) <= 80 for p in parts)
    assert all(p.endswith(",") or p.endswith(".") for p in parts)      # cut at commas
    assert " ".join(parts) == long
    assert [len(p) for p in split_phrases("x" * 450, limit=200)] == [200, 200, 50]


def test_the_first_phrase_ends_at_its_first_clause_of_four_words():
    """A stream's first audio waits for one clause, not a whole sentence; the phrases after
    it are still whole sentences."""
    assert split_phrases("Paris is the capital of France, known for its art. It is old, "
                         "and big.") == ["Paris is the capital of France,",
                                         "known for its art.", "It is old, and big."]
    assert split_phrases("Yes, it is. Go on, then.") == ["Yes, it is.", "Go on, then."]
    assert split_phrases("One two three four, ok.") == ["One two three four, ok."]   # short tail
    text = "Well then, as you can see, the weather is fine today."
    assert " ".join(split_phrases(text)) == text
    assert split_phrases("Paris is a lovely city in France. It is old.") == [
        "Paris is a lovely city", "in France.", "It is old."]      # before a phrase's opener


def test_voice_and_language_mapping():
    full = ["af_alloy", "af_bella", "af_heart", "am_echo", "bf_emma"]
    assert kokoro_voice("alloy", full) == "af_alloy"
    assert kokoro_voice("shimmer", full) == kokoro_voice("coral", full) == "af_bella"
    assert kokoro_voice("bf_emma", full) == "bf_emma"          # raw id as-is
    assert kokoro_voice("nobody", full) == "af_heart"
    japanese = ["jf_alpha", "jf_gongitsune", "jm_kumo"]
    assert kokoro_voice("alloy", japanese) == "jf_alpha"       # not in the pack: first voice
    assert kokoro_voice("jm_kumo", japanese) == "jm_kumo"
    assert kokoro_lang("en") == "en-us" and kokoro_lang(None) == "en-us"
    assert kokoro_lang("ja") == "ja" and kokoro_lang("EN-GB") == "en-gb"
    assert kokoro_lang("zh") == "cmn" and kokoro_lang("pt") == "pt-br"
    assert kokoro_lang("de") == "en-us"                         # not a Kokoro language


def test_parse_speech_fields():
    p = parse_speech({"model": "k", "input": "hi", "unknown": 1}, 100)
    assert (p.request.voice, p.request.speed, p.request.language) == ("alloy", 1.0, "en")
    assert (p.response_format, p.stream) == ("wav", False)
    bad = [({"input": "hi"}, "model"), ({"model": "k"}, "input"),
           ({"model": "k", "input": "  "}, "input"), ({"model": "k", "input": "x" * 101}, "input"),
           ({"model": "k", "input": "hi", "speed": 4.5}, "speed"),
           ({"model": "k", "input": "hi", "speed": True}, "speed"),
           ({"model": "k", "input": "hi", "response_format": "ogg"}, "response_format"),
           ({"model": "k", "input": "hi", "stream": "yes"}, "stream")]
    for body, param in bad:
        with pytest.raises(errors.InvalidRequest) as exc:
            parse_speech(body, 100)
        assert exc.value.param == param


def test_wav_header_and_encoders():
    head = parse_wav(wav_header(24000, 480) + bytes(480))
    assert head == {"riff_size": 36 + 480, "format": 1, "channels": 1, "rate": 24000,
                    "bits": 16, "data_size": 480}
    assert parse_wav(wav_header(24000, None))["data_size"] == 0xFFFFFFFF
    tone = (np.sin(np.arange(2400) * 0.1) * 8000).astype("<i2").tobytes()
    body, ctype = encode(tone, 24000, "flac")
    assert ctype == "audio/flac" and body[:4] == b"fLaC"
    body, ctype = encode(tone, 24000, "mp3")
    assert ctype == "audio/mpeg" and len(body) > 100
    assert encode(tone, 24000, "opus")[1] == "audio/ogg"
    assert encode(tone, 24000, "aac")[1] == "audio/aac"
    assert encode(b"", 24000, "flac")[1] == "audio/flac"       # nothing spoken: still valid
    assert encode(tone, 24000, "pcm") == (tone, "audio/pcm")


# ----------------------------------------------------------------- real engine

@pytest.fixture(scope="module")
def speaker():
    require_kokoro()
    engine = KokoroSpeaker()
    report = engine.load(LoadSpec(model_id="kokoro", weights_path=MODELS_DIR / ONNX,
                                  files={"voices_path": MODELS_DIR / VOICES}))
    assert report.total_ms > 0
    yield engine
    engine.unload()


@pytest.mark.real
def test_engine_synthesizes_phrases_with_pauses(speaker):
    assert speaker.provider in ("CUDAExecutionProvider", "CPUExecutionProvider")
    assert speaker.voices[0] == "jf_alpha"       # the lineup's pack is Japanese-only
    chunks: list[bytes] = []
    secs = speaker.synthesize(SpeechRequest(text=TEXT, language="en"), chunks.append,
                              threading.Event())
    assert speaker.sample_rate == 24000 and len(chunks) == 2      # one per phrase
    pcm = b"".join(chunks)
    assert secs == pytest.approx(len(pcm) / 2 / 24000)
    assert 0.5 < secs < 10 and rms(pcm) > 0.01
    assert not any(chunks[1][:2 * PAUSE_SAMPLES])                # 180 ms silence first
    assert rms(chunks[1][2 * PAUSE_SAMPLES:]) > 0.01


@pytest.mark.real
def test_engine_cancel_stops_at_the_next_phrase(speaker):
    cancel = threading.Event()
    chunks: list[bytes] = []

    def on_audio(chunk):
        chunks.append(chunk)
        cancel.set()

    secs = speaker.synthesize(SpeechRequest(text=TEXT), on_audio, cancel)
    assert len(chunks) == 1 and secs == pytest.approx(len(chunks[0]) / 2 / 24000)


# ------------------------------------------------------------------------ HTTP

def app_for(*blocks: str, **limits):
    import tomllib
    cfg = parse_config(tomllib.loads(f'models_dir = "{MODELS_DIR}"\n' + "".join(blocks)))
    for k, v in limits.items():
        setattr(cfg.limits, k, v)
    return create_app(cfg, stage=False)


async def post(app, body: dict):
    return await app.asgi_client.post("/v1/audio/speech", json=body)


@pytest.mark.anyio
async def test_http_errors():
    app = app_for(MODELS, CHAT, max_prompt_chars=50)
    cases = [({"model": "kokoro", "input": ""}, 400, "input"),
             ({"model": "kokoro", "input": "hi", "speed": 0.1}, 400, "speed"),
             ({"model": "kokoro", "input": "hi", "speed": 4.01}, 400, "speed"),
             ({"model": "kokoro", "input": "x" * 51}, 400, "input"),
             ({"model": "chat", "input": "hi"}, 400, "model"),
             ({"model": "nope", "input": "hi"}, 404, None)]
    for body, status, param in cases:
        _req, resp = await post(app, body)
        assert resp.status == status, (body, resp.text)
        err = resp.json["error"]
        assert err["type"] == ("model_not_found" if status == 404 else "invalid_request_error")
        if param:
            assert err["param"] == param
    _req, resp = await post(app, {"model": "chat", "input": "hi"})
    assert "text_to_speech" in resp.json["error"]["message"]


@pytest.mark.real
@pytest.mark.anyio
async def test_http_wav_pcm_mp3_and_telemetry_headers():
    require_kokoro()
    app = app_for(MODELS)
    req, resp = await post(app, {"model": "kokoro", "input": "Hello there.", "voice": "alloy"})
    assert resp.status == 200 and resp.headers["content-type"] == "audio/wav"
    head = parse_wav(resp.body)
    assert (head["rate"], head["channels"], head["bits"], head["format"]) == (24000, 1, 16, 1)
    assert head["data_size"] == len(resp.body) - 44 > 24000       # over half a second
    for name in ("previous-tier", "gpu-layers", "switch-ms", "inference-ms", "audio-secs",
                 "rtf"):
        assert f"x-hypnos-{name}" in resp.headers, name
    assert resp.headers["x-hypnos-previous-tier"] == "tier3_nvme_ssd"    # loaded on demand
    assert float(resp.headers["x-hypnos-switch-ms"]) > 0
    assert float(resp.headers["x-hypnos-audio-secs"]) == pytest.approx(
        head["data_size"] / 48000, abs=1e-3)
    assert 0 < req.ctx.record.ttfa_ms <= float(resp.headers["x-hypnos-inference-ms"])
    _req, resp = await post(app, {"model": "kokoro", "input": "Hello there.",
                                  "response_format": "pcm"})
    assert resp.headers["content-type"] == "audio/pcm" and len(resp.body) % 2 == 0
    assert rms(resp.body) > 0.01
    assert resp.headers["x-hypnos-previous-tier"] == "tier1_gpu_vram"
    _req, resp = await post(app, {"model": "kokoro", "input": "Hello there.",
                                  "response_format": "mp3"})
    assert resp.headers["content-type"] == "audio/mpeg" and len(resp.body) > 1000


@pytest.mark.real
@pytest.mark.anyio
async def test_http_stream_wav_is_open_ended():
    require_kokoro()
    app = app_for(MODELS)
    req, resp = await post(app, {"model": "kokoro", "input": TEXT, "stream": True})
    assert resp.status == 200 and resp.headers["content-type"] == "audio/wav"
    head = parse_wav(resp.body)
    assert head["riff_size"] == head["data_size"] == 0xFFFFFFFF and head["rate"] == 24000
    pcm = resp.body[44:]
    assert len(pcm) > 24000 and rms(pcm) > 0.01
    assert "x-hypnos-previous-tier" in resp.headers and "x-hypnos-switch-ms" in resp.headers
    assert "x-hypnos-inference-ms" not in resp.headers       # unknown when headers go out
    record = req.ctx.record
    assert record.ttfa_ms > 0 and record.audio_secs == pytest.approx(len(pcm) / 48000)


# ---------------------------------------------------------------- real server

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_kokoro()
    tmp = tmp_path_factory.mktemp("speech")
    config = tmp / "hypnos.toml"
    config.write_text(f'models_dir = "{MODELS_DIR}"\n' + MODELS
                      + 'initial_tier = "tier1_gpu_vram"\n')
    srv = ServerProcess(config, tmp / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


@pytest.mark.real
@pytest.mark.slow
def test_openai_client_speech(server):
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    audio = client.audio.speech.create(model="kokoro", voice="alloy", input="Hello there.")
    body = audio.content
    head = parse_wav(body)
    assert head["rate"] == 24000 and head["data_size"] == len(body) - 44
    assert rms(body[44:]) > 0.01


@pytest.mark.real
@pytest.mark.slow
def test_stream_first_audio_before_the_end(server):
    body = {"model": "kokoro", "input": TEXT + " It speaks one phrase at a time.",
            "stream": True, "response_format": "pcm"}
    started = time.monotonic()
    first, received = None, io.BytesIO()
    with httpx.stream("POST", server.base + "/v1/audio/speech", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "audio/pcm"
        for chunk in r.iter_raw():
            if chunk and first is None:
                first = time.monotonic() - started
            received.write(chunk)
    total = time.monotonic() - started
    assert first is not None and first < total
    assert rms(received.getvalue()) > 0.01


def _leases(server) -> int:
    return next(m["active_leases"] for m in server.status()["models"] if m["id"] == "kokoro")


@pytest.mark.real
@pytest.mark.slow
def test_disconnect_cancels_at_the_next_phrase(server):
    """Closing a stream after its first phrase frees the lease about one phrase later, not
    after the remaining 29 phrases (timings relative to this run's own phrase time)."""
    text = " ".join(f"This is sentence number {i} of a long text." for i in range(30))
    body = {"model": "kokoro", "input": text, "stream": True, "response_format": "pcm"}
    started = time.monotonic()
    with httpx.stream("POST", server.base + "/v1/audio/speech", json=body, timeout=120) as r:
        next(chunk for chunk in r.iter_raw() if chunk)
        phrase = time.monotonic() - started
        assert _leases(server) == 1
    gone = time.monotonic()
    while _leases(server) and time.monotonic() - gone < 10 * phrase + 5:
        time.sleep(0.05)
    assert _leases(server) == 0
    assert time.monotonic() - gone < 10 * phrase + 5
