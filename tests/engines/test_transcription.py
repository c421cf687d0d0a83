"""Transcription: the faster-whisper engine, POST /v1/audio/transcriptions (ASGI client and
the official `openai` client against `hypnos serve`), and live transcription over WebSocket.

Speech is made here, offline, with the default lineup's Kokoro model (a Japanese voice
speaking English) and transcribed by the real whisper tiny.en; tiny.en gets both sentences
word for word except "She sells", which it hears as "You sell".
"""
import asyncio
import io
import json
import sys
import threading
import time
import tomllib
import wave
from contextlib import asynccontextmanager

import httpx
import numpy as np
import pytest
from sanic import Sanic
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from conftest import MODELS_DIR, ROOT
from hypnos.engines.errors import AudioDecodeError, EngineError
from hypnos.engines.records import LoadSpec, Segment, TranscribeRequest, TranscribeResult
from hypnos.engines.whisper import WhisperTranscriber, decode_audio
from hypnos.service import errors
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config
from hypnos.service.inference.live import EnergyVad, PcmReader, SampleBuffer
from hypnos.service.routes.transcriptions import LIVE_PATH, render_srt, render_vtt
from hypnos.service.wire.transcription import parse_hotwords, parse_language

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess, free_port  # noqa: E402

Sanic.test_mode = True
real = pytest.mark.real
WHISPER = MODELS_DIR / "whisper-tiny.en"
KOKORO = MODELS_DIR / "kokoro-82m" / "kokoro-v1.0.int8.onnx"
VOICES = MODELS_DIR / "kokoro-82m" / "voices_ja.npz"
FOX = "The quick brown fox jumps over the lazy dog."
SHELLS = "She sells sea shells by the sea shore."
KEY = "sk-live-test"

CONFIG = f"""
models_dir = "{MODELS_DIR}"
{{extra}}
[[models]]
id = "whisper"
modality = "speech_to_text"
engine = "faster_whisper"
weights_path = "whisper-tiny.en"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
"""


def config(extra: str = "", **limits):
    cfg = parse_config(tomllib.loads(CONFIG.format(extra=extra)))
    for key, value in limits.items():
        setattr(cfg.limits, key, value)
    return cfg


def words(text: str) -> str:
    return text.lower().replace(",", " ").replace(".", " ")


def assert_fox(text: str) -> None:
    assert "fox" in words(text) and "dog" in words(text), text


def assert_shells(text: str) -> None:
    assert "sea" in words(text) and "shell" in words(text), text


# ---------------------------------------------------------------- speech made offline


class Speech:
    """Two synthesized sentences as float32 mono at ``rate``, and encodings of the first."""

    def __init__(self, fox: np.ndarray, shells: np.ndarray, rate: int):
        self.fox, self.shells, self.rate = fox, shells, rate

    def pcm16(self, samples: np.ndarray) -> bytes:
        return (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()

    def wav(self, samples: np.ndarray | None = None) -> bytes:
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(self.rate)
            w.writeframes(self.pcm16(self.fox if samples is None else samples))
        return buf.getvalue()

    def encode(self, container: str, codec: str, rate: int | None = None) -> bytes:
        """The first sentence through PyAV's encoders (flac, opus in ogg, mp3)."""
        import av
        buf = io.BytesIO()
        with av.open(buf, "w", format=container) as out:
            stream = out.add_stream(codec, rate=rate or self.rate)
            stream.layout = "mono"
            frame = av.AudioFrame.from_ndarray(
                np.frombuffer(self.pcm16(self.fox), "<i2")[None, :], format="s16",
                layout="mono")
            frame.sample_rate = self.rate
            resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono",
                                          rate=stream.codec_context.sample_rate)
            for piece in resampler.resample(frame) + resampler.resample(None):
                out.mux(stream.encode(piece))
            out.mux(stream.encode(None))
        return buf.getvalue()


def require_models() -> None:
    for path in (WHISPER, KOKORO, VOICES):
        if not path.exists():
            pytest.fail(f"{path} is missing: run `./run.sh models` (default lineup) first")


@pytest.fixture(scope="module")
def speech() -> Speech:
    require_models()
    from kokoro_onnx import Kokoro
    kokoro = Kokoro(str(KOKORO), str(VOICES))
    fox, rate = kokoro.create(FOX, voice="jf_alpha", speed=1.0, lang="en-us")
    shells, _ = kokoro.create(SHELLS, voice="jf_alpha", speed=1.0, lang="en-us")
    return Speech(fox.astype(np.float32), shells.astype(np.float32), rate)


@pytest.fixture(scope="module")
def engine():
    require_models()
    eng = WhisperTranscriber()
    eng.load(LoadSpec(model_id="whisper", weights_path=WHISPER, threads=2))
    yield eng
    eng.unload()


# ---------------------------------------------------------------- engine


@real
def test_engine_transcribes_a_wav(engine, speech):
    result = engine.transcribe(TranscribeRequest(audio=speech.wav()), threading.Event())
    assert_fox(result.text)
    assert result.language == "en"
    assert result.duration_secs == pytest.approx(len(speech.fox) / speech.rate, abs=0.01)
    assert result.segments and result.segments[0].start == 0.0
    assert result.processing_ms > 0


@real
@pytest.mark.parametrize("container,codec,rate", [
    ("flac", "flac", None), ("ogg", "libopus", 48000), ("mp3", "libmp3lame", None)])
def test_engine_decodes_other_containers(engine, speech, container, codec, rate):
    audio = speech.encode(container, codec, rate)
    result = engine.transcribe(TranscribeRequest(audio=audio, language="en",
                                                 hotwords=["fox", "dog"]), threading.Event())
    assert_fox(result.text)
    # With hotwords whisper has put the end of this ~3 s clip at 7.0 s: the engine holds
    # every segment inside the audio.
    assert result.segments
    assert all(0 <= s.start <= s.end <= result.duration_secs for s in result.segments)


@real
def test_engine_reads_a_short_clip_in_a_short_window_without_timestamps(engine, speech):
    """Asked for no timestamps, the fox (~3 s) is encoded in a 10 s window: whisper's encoder
    halves its frames, so the output has 500 positions, not the 1500 of the 30 s window that
    faster-whisper pads to and that timestamps need. The words come out as with 30 s."""
    from faster_whisper.audio import pad_or_trim

    from hypnos.engines.whisper import short_windows
    model = engine._model
    audio = decode_audio(speech.wav())
    features = pad_or_trim(model.feature_extractor(audio))
    assert model.encode(features).shape[1] == 1500
    with short_windows():
        assert model.encode(features).shape[1] == 500
        long = pad_or_trim(model.feature_extractor(np.tile(audio, 4)))     # ~12 s of speech
        assert model.encode(long).shape[1] == 1500
    assert model.encode(features).shape[1] == 1500
    result = engine.transcribe(TranscribeRequest(audio=speech.wav(), timestamps=False),
                               threading.Event())
    assert_fox(result.text)
    assert result.segments == []


@real
def test_engine_cancelled_before_start_returns_nothing(engine, speech):
    cancel = threading.Event()
    cancel.set()
    result = engine.transcribe(TranscribeRequest(audio=speech.wav()), cancel)
    assert result.text == "" and result.segments == []


@pytest.mark.parametrize("data", [b"", b"not audio at all" * 40,
                                  b"\x89PNG\r\n\x1a\n" + bytes(600)])
def test_undecodable_audio_raises_audio_decode_error(data):
    with pytest.raises(AudioDecodeError):
        decode_audio(data)


def test_engine_refuses_a_path_that_is_not_a_folder(tmp_path):
    """A missing path must never become a hub lookup (faster-whisper reads it as a repo id)."""
    eng = WhisperTranscriber()
    with pytest.raises(EngineError, match="not a folder"):
        eng.load(LoadSpec(model_id="w", weights_path=tmp_path / "Systran" / "tiny"))
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(EngineError, match=r"tokenizer\.json"):
        eng.load(LoadSpec(model_id="w", weights_path=tmp_path))


# ---------------------------------------------------------------- parsing and rendering


@pytest.mark.parametrize("value,expected", [
    (None, []), ("", []), ("Ada, Quillon ,Neutrino", ["Ada", "Quillon", "Neutrino"]),
    ('["Ada Lovelace", "Quillon"]', ["Ada Lovelace", "Quillon"]),
    (["Ada", "Quillon, Neutrino"], ["Ada", "Quillon", "Neutrino"]),
    (",".join(f"w{i}" for i in range(25)), [f"w{i}" for i in range(25)]),
])
def test_hotwords_forms(value, expected):
    assert parse_hotwords(value) == expected


@pytest.mark.parametrize("value", [",".join(f"w{i}" for i in range(26)), "[1, 2]", "[oops",
                                   [3]])
def test_hotwords_refused(value):
    with pytest.raises(errors.InvalidRequest) as exc:
        parse_hotwords(value)
    assert exc.value.param == "hotwords"


def test_language_codes():
    assert parse_language("EN") == "en" and parse_language("en-US") == "en"
    assert parse_language(None) is None
    with pytest.raises(errors.InvalidRequest):
        parse_language("english!")


def test_srt_and_vtt_rendering():
    result = TranscribeResult(text="Hello there. General", language="en", duration_secs=3726.5,
                              segments=[Segment(0.0, 1.5, "Hello there."),
                                        Segment(3725.25, 3726.5, "General")])
    assert render_srt(result) == ("1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n"
                                  "2\n01:02:05,250 --> 01:02:06,500\nGeneral\n")
    assert render_vtt(result) == ("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n"
                                  "01:02:05.250 --> 01:02:06.500\nGeneral\n")


# ---------------------------------------------------------------- VAD and PCM (pure)


def tone(secs: float, rate: int = 16000, level: float = 0.3) -> np.ndarray:
    t = np.arange(int(secs * rate)) / rate
    return (level * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def silence(secs: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(secs * rate), np.float32)


def test_vad_closes_an_utterance_at_a_pause_while_streaming():
    vad = EnergyVad(16000, silence_ms=500)
    stream = np.concatenate([silence(0.5), tone(1.0), silence(0.8), tone(0.6), silence(0.2)])
    cuts = []
    for i in range(0, len(stream), 1600):                   # 100 ms frames
        cuts += vad.push(stream[i:i + 1600])
    assert len(cuts) == 1                                    # the first, during the stream
    start, end = cuts[0]
    assert 0.25 <= start / 16000 <= 0.5 and 1.5 <= end / 16000 <= 1.85
    assert vad.speaking
    start, end = vad.flush()                                 # the second, at end of stream
    assert 2.0 <= start / 16000 <= 2.3 and end / 16000 == pytest.approx(3.1, abs=0.05)
    assert vad.flush() is None


def test_vad_settles_an_utterance_where_its_pause_will_close_it():
    """Once ``post_pad`` of quiet has passed, ``settled`` is the cut the pause will make (if
    the speech does not resume); resumed speech moves it, and a click never settles."""
    vad = EnergyVad(16000, silence_ms=800)
    assert vad.quiet() == 0
    cuts = vad.push(np.concatenate([silence(0.5), tone(1.0), silence(0.2)]))
    assert cuts == [] and vad.settled() is None              # the end may still move
    assert vad.quiet() == pytest.approx(0.2 * 16000, abs=480)   # 30 ms frames
    assert vad.push(silence(0.15)) == []
    early = vad.settled()
    assert early is not None
    assert vad.push(silence(0.2)) == [] and vad.settled() == early
    vad.push(tone(0.5))                                      # speech again
    assert vad.settled() is None
    vad.push(silence(0.4))
    later = vad.settled()
    assert later is not None and later[0] == early[0] and later[1] > early[1]
    assert vad.push(silence(0.5)) == [later] and vad.settled() is None
    click = EnergyVad(16000, silence_ms=800)
    click.push(np.concatenate([silence(0.5), tone(0.06), silence(0.5)]))
    assert click.settled() is None


def test_vad_drops_clicks_and_cuts_long_speech():
    vad = EnergyVad(16000, silence_ms=300, max_utterance_secs=2.0)
    assert vad.push(np.concatenate([tone(0.06), silence(1.0)])) == []    # a click
    cuts = vad.push(tone(5.0))
    assert [round((e - s) / 16000, 1) for s, e in cuts] == [2.0, 2.0]
    assert vad.speaking


def test_vad_follows_a_noise_floor():
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(16000 * 8) * 0.02).astype(np.float32)   # about -34 dBFS
    stream = noise.copy()
    stream[16000 * 6: 16000 * 7] += tone(1.0)
    cuts = EnergyVad(16000).push(stream)
    assert len(cuts) == 1 and 5.7 <= cuts[0][0] / 16000 <= 6.0


def test_pcm_reader_keeps_split_samples():
    pcm16 = PcmReader("pcm16")
    data = np.array([0, 16384, -32768], "<i2").tobytes()
    out = np.concatenate([pcm16.push(data[:3]), pcm16.push(data[3:])])
    assert out.tolist() == [0.0, 0.5, -1.0]
    f32 = PcmReader("f32")
    assert f32.push(np.array([0.25, np.nan, 3.0], "<f4").tobytes()).tolist() == [0.25, 0, 1]


def test_sample_buffer_slices_across_chunks_and_trims():
    buf = SampleBuffer()
    for i in range(4):
        buf.append(np.full(10, i, np.float32))
    assert buf.slice(8, 12).tolist() == [0, 0, 1, 1]
    buf.trim(25)
    assert buf.slice(0, 40).tolist() == [2] * 10 + [3] * 10


# ---------------------------------------------------------------- HTTP (ASGI client)


async def post(app, body=None, *, files=None, data=None, headers=None):
    kw = {"json": body} if files is None else {"files": files, "data": data}
    _req, resp = await app.asgi_client.post("/v1/audio/transcriptions", headers=headers, **kw)
    return resp


def upload(audio: bytes, name: str = "clip.wav"):
    return {"file": (name, audio, "audio/wav")}


def assert_400(resp, param: str | None = None, fragment: str = "") -> dict:
    assert resp.status == 400, resp.text
    err = resp.json["error"]
    assert err["type"] == "invalid_request_error" and fragment in err["message"]
    if param:
        assert err["param"] == param
    return err


@real
@pytest.mark.anyio
async def test_http_every_response_format(speech):
    app = create_app(config(), stage=False)
    form = {"model": "whisper", "language": "en", "hotwords[]": ["fox", "dog"]}
    resp = await post(app, files=upload(speech.wav()), data=form)
    assert resp.status == 200, resp.text
    body = resp.json
    assert_fox(body["text"])
    assert body["language"] == "en" and body["duration_secs"] == pytest.approx(2.86, abs=0.05)
    engine = body["hypnos_telemetry"]["engine"]
    assert engine["audio_secs"] == body["duration_secs"] and 0 < engine["rtf"] < 10
    assert body["hypnos_telemetry"]["tier_switch_latency_ms"] > 0       # loaded for this one
    resp = await post(app, files=upload(speech.wav()), data={**form, "response_format": "text"})
    assert resp.headers["content-type"].startswith("text/plain")
    assert_fox(resp.text)
    assert float(resp.headers["x-hypnos-audio-secs"]) == pytest.approx(2.86, abs=0.05)
    assert float(resp.headers["x-hypnos-rtf"]) > 0
    resp = await post(app, files=upload(speech.wav()),
                      data={**form, "response_format": "verbose_json"})
    verbose = resp.json
    assert verbose["task"] == "transcribe" and verbose["language"] == "en"
    assert verbose["duration"] == pytest.approx(2.86, abs=0.05)
    seg = verbose["segments"][0]
    assert seg["id"] == 0 and seg["start"] == 0.0 and seg["end"] > 2 and "fox" in seg["text"]
    assert "hypnos_telemetry" in verbose
    srt = (await post(app, files=upload(speech.wav()),
                      data={**form, "response_format": "srt"})).text
    assert srt.startswith("1\n00:00:00,000 --> 00:00:0") and "fox" in srt
    resp = await post(app, files=upload(speech.wav()), data={**form, "response_format": "vtt"})
    assert resp.headers["content-type"].startswith("text/vtt")
    assert resp.text.startswith("WEBVTT\n\n00:00:00.000 --> ") and "fox" in resp.text


@real
@pytest.mark.anyio
async def test_http_json_body_and_undecodable_audio(speech):
    app = create_app(config(), stage=False)
    resp = await post(app, {"model": "whisper", "audio_bytes": list(speech.wav()),
                            "filename": "clip.wav"})
    assert resp.status == 200, resp.text
    assert_fox(resp.json["text"])
    assert "language" not in resp.json                 # echoed only when given
    assert_400(await post(app, files=upload(b"definitely not audio" * 50),
                          data={"model": "whisper"}), "file", "can be decoded")
    assert_400(await post(app, {"model": "whisper", "audio_bytes": [1, 2, 3]}), "audio_bytes")


@pytest.mark.anyio
@pytest.mark.parametrize("form,param,fragment", [
    ({"model": "whisper", "response_format": "mp4"}, "response_format", "mp4"),
    ({"model": "whisper", "hotwords": ",".join(f"w{i}" for i in range(26))}, "hotwords",
     "26 hotwords"),
    ({"model": "whisper", "hotwords[]": [f"w{i}" for i in range(26)]}, "hotwords", "at most 25"),
    ({"model": "chat"}, "model", "speech_to_text"),
    ({"response_format": "json"}, "model", "required"),
    ({"model": "whisper", "language": "klingon!"}, "language", ""),
])
async def test_http_400s_before_any_model_work(form, param, fragment):
    app = create_app(config(), stage=False)
    assert_400(await post(app, files=upload(b"RIFF" + bytes(100)), data=form), param, fragment)
    assert app.ctx.scheduler.models["whisper"].engine is None       # nothing was loaded


@pytest.mark.anyio
async def test_http_audio_size_limit_missing_file_and_json_shape():
    app = create_app(config(max_audio_bytes=1000), stage=False)
    assert_400(await post(app, files=upload(bytes(1001)), data={"model": "whisper"}),
               "file", "max_audio_bytes")
    assert_400(await post(app, {"model": "whisper", "audio_bytes": [0] * 1001}),
               "audio_bytes", "max_audio_bytes")
    assert_400(await post(app, files={"other": ("x", b"x")}, data={"model": "whisper"}),
               "file", "'file'")
    assert_400(await post(app, {"model": "whisper", "audio_bytes": "UklGRg=="}), "audio_bytes")
    assert_400(await post(app, {"model": "whisper", "audio_bytes": [1, 256]}), "audio_bytes")


@pytest.mark.anyio
async def test_http_unknown_model_is_404_not_another_models_transcript():
    app = create_app(config(), stage=False)
    resp = await post(app, files=upload(b"RIFF" + bytes(100)), data={"model": "whisper-1"})
    assert resp.status == 404 and resp.json["error"]["type"] == "model_not_found"
    resp = await post(app, {"model": "nope", "audio_bytes": [1, 2]})
    assert resp.status == 404


@pytest.mark.anyio
async def test_http_needs_the_api_key_when_keys_are_set():
    app = create_app(config(f'[server]\napi_keys = ["{KEY}"]'), stage=False)
    resp = await post(app, files=upload(b"RIFF"), data={"model": "whisper"})
    assert resp.status == 401 and resp.json["error"]["code"] == "invalid_api_key"


# ---------------------------------------------------------------- live (in-process server)


@asynccontextmanager
async def live_server(cfg, **kw):
    """A real Sanic server in this event loop, so the native WebSocket path is what runs."""
    app = create_app(cfg, **{"stage": False, **kw})
    port = free_port()
    srv = await app.create_server(host="127.0.0.1", port=port, return_asyncio_server=True)
    await srv.startup()
    await srv.before_start()
    await srv.after_start()
    try:
        yield f"ws://127.0.0.1:{port}{LIVE_PATH}", app
    finally:
        await srv.before_stop()
        srv.close()
        await srv.wait_closed()
        await srv.after_stop()


async def drain(ws) -> list[dict]:
    """Every frame until the server closes."""
    out = []
    try:
        while True:
            out.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
    except ConnectionClosed:
        return out


async def refused(url, opening) -> tuple[list[dict], int]:
    async with connect(url) as ws:
        await ws.send(opening)
        frames = await drain(ws)
        return frames, ws.close_code


@pytest.mark.anyio
@pytest.mark.parametrize("opening,code,param", [
    (b"\x00\x01", "invalid_request_error", None),
    ("not json", "invalid_request_error", None),
    (json.dumps({"sample_rate": 16000}), "invalid_request_error", "model"),
    (json.dumps({"model": "nope"}), "model_not_found", None),
    (json.dumps({"model": "chat"}), "invalid_request_error", "model"),
    (json.dumps({"model": "whisper", "sample_rate": 96000}), "invalid_request_error",
     "sample_rate"),
    (json.dumps({"model": "whisper", "format": "mulaw"}), "invalid_request_error", "format"),
    (json.dumps({"model": "whisper", "hotwords": [f"w{i}" for i in range(26)]}),
     "invalid_request_error", "hotwords"),
])
async def test_live_bad_opening_frames(opening, code, param):
    async with live_server(config()) as (url, _app):
        frames, close_code = await refused(url, opening)
    assert [f["type"] for f in frames] == ["error"] and frames[0]["code"] == code
    assert frames[0].get("param") == param and close_code == 1008


@pytest.mark.anyio
async def test_live_limits_idle_session_and_protocol():
    cfg = config(live_idle_timeout_secs=0.3, live_max_session_secs=0.5)
    async with live_server(cfg) as (url, _app):
        async with connect(url) as ws:                       # idle
            await ws.send(json.dumps({"model": "whisper"}))
            frames = await drain(ws)
        assert [f["type"] for f in frames] == ["ready", "error"]
        assert frames[0]["idle_timeout_secs"] == 0.3 and frames[1]["code"] == "idle_timeout"
        assert ws.close_code == 1008
        async with connect(url) as ws:                       # more audio than allowed
            await ws.send(json.dumps({"model": "whisper", "sample_rate": 8000}))
            await ws.send(bytes(2 * 8000))                    # 1 s of pcm16 silence
            frames = await drain(ws)
        assert [f["type"] for f in frames] == ["ready", "error"]
        assert frames[1]["code"] == "session_limit"
        async with connect(url) as ws:                       # an unknown control frame
            await ws.send(json.dumps({"model": "whisper"}))
            await ws.send(json.dumps({"type": "pause"}))
            frames = await drain(ws)
        assert frames[-1]["code"] == "invalid_request_error"
        async with connect(url) as ws:                       # end with nothing said
            await ws.send(json.dumps({"model": "whisper", "format": "f32"}))
            await ws.send(np.zeros(1600, "<f4").tobytes())
            await ws.send(json.dumps({"type": "end"}))
            frames = await drain(ws)
        assert [f["type"] for f in frames] == ["ready", "done"] and ws.close_code == 1000


@pytest.mark.anyio
async def test_live_upgrade_checks_key_origin_and_readiness():
    cfg = config(f'[server]\napi_keys = ["{KEY}"]')
    auth = {"Authorization": f"Bearer {KEY}"}
    async with live_server(cfg) as (url, _app):
        for headers, status in (({}, 401), ({"Authorization": "Bearer nope"}, 401),
                                ({**auth, "Origin": "https://evil.example"}, 403)):
            with pytest.raises(InvalidStatus) as exc:
                async with connect(url, additional_headers=headers):
                    pass
            assert exc.value.response.status_code == status
        async with connect(url, additional_headers={**auth, "Origin": "http://localhost:3000"}) \
                as ws:
            await ws.send(json.dumps({"model": "whisper"}))
            assert json.loads(await ws.recv())["type"] == "ready"
    gate = threading.Event()
    try:
        async with live_server(config(), stage=True, before_stage=gate.wait) as (url, _app):
            with pytest.raises(InvalidStatus) as exc:
                async with connect(url):
                    pass
            assert exc.value.response.status_code == 503
    finally:
        gate.set()


# ---------------------------------------------------------------- against `hypnos serve`


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_models()
    folder = tmp_path_factory.mktemp("stt")
    path = folder / "hypnos.toml"
    path.write_text(CONFIG.format(extra=f'[server]\napi_keys = ["{KEY}"]'))
    srv = ServerProcess(path, folder / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


def client(server, key: str = KEY):
    import openai
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0)


@real
@pytest.mark.slow
def test_openai_client_transcriptions(server, speech, tmp_path):
    import openai
    path = tmp_path / "fox.wav"
    path.write_bytes(speech.wav())
    with path.open("rb") as f:
        result = client(server).audio.transcriptions.create(model="whisper", file=f)
    assert_fox(result.text)
    assert result.model_extra["hypnos_telemetry"]["engine"]["rtf"] > 0
    text = client(server).audio.transcriptions.create(model="whisper", file=path,
                                                      response_format="text")
    assert isinstance(text, str)
    assert_fox(text)
    verbose = client(server).audio.transcriptions.create(
        model="whisper", file=path, response_format="verbose_json", language="en")
    assert verbose.language == "en" and verbose.duration == pytest.approx(2.86, abs=0.05)
    assert_fox(verbose.segments[0].text)
    with pytest.raises(openai.NotFoundError):
        client(server).audio.transcriptions.create(model="whisper-1", file=path)
    with pytest.raises(openai.BadRequestError):
        client(server).audio.transcriptions.create(model="whisper", file=path,
                                                   response_format="mp4")
    with pytest.raises(openai.AuthenticationError):
        client(server, "wrong").audio.transcriptions.create(model="whisper", file=path)


def chunks(data: bytes, size: int):
    return [data[i:i + size] for i in range(0, len(data), size)]


@real
@pytest.mark.slow
def test_live_final_arrives_at_a_pause_while_the_client_streams(server, speech):
    from websockets.sync.client import connect as sync_connect
    rate = speech.rate
    lead, gap = np.zeros(int(0.3 * rate), np.float32), np.zeros(rate, np.float32)
    first = speech.pcm16(np.concatenate([lead, speech.fox, gap]))
    second = speech.pcm16(np.concatenate([speech.shells, lead]))
    url = server.base.replace("http", "ws") + LIVE_PATH
    with sync_connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(json.dumps({"model": "whisper", "sample_rate": rate, "language": "en"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "ready"
        for piece in chunks(first, rate // 5):                     # 100 ms frames
            ws.send(piece)
        frames = []
        while not frames or frames[-1]["type"] != "final":       # before "end" is sent
            frames.append(json.loads(ws.recv(timeout=60)))
        first_final = frames[-1]
        assert_fox(first_final["text"])
        assert first_final["id"] == 0 and 0.0 <= first_final["start"] <= 0.3
        assert 3.0 <= first_final["end"] <= 3.8
        assert "rtf" in first_final["hypnos_telemetry"]["engine"]
        status = httpx.get(server.base + "/v1/memory/status", timeout=30,
                           headers={"Authorization": f"Bearer {KEY}"}).json()
        whisper = next(m for m in status["models"] if m["id"] == "whisper")
        assert whisper["active_leases"] == 0                       # no lease between utterances
        for piece in chunks(second, rate // 5):
            ws.send(piece)
        ws.send(json.dumps({"type": "end"}))
        while frames[-1]["type"] != "done":
            frames.append(json.loads(ws.recv(timeout=60)))
    assert all(f["type"] in ("partial", "final", "done") for f in frames), frames
    finals = [f for f in frames if f["type"] == "final"]
    assert [f["id"] for f in finals] == [0, 1]
    assert_shells(finals[1]["text"])
    assert finals[1]["start"] >= first_final["end"]
    assert ws.close_code == 1000
    partials = [f for f in frames if f["type"] == "partial"]
    assert all(p["id"] in (0, 1) and p["start"] < p["end"] for p in partials)


@real
@pytest.mark.slow
def test_live_pause_is_transcribed_ahead_and_the_final_keeps_it(server, speech):
    """Once a pause fixes where the utterance ends (300 ms after its last voiced frame), that
    audio is transcribed and sent as a partial; the final, cut after ``silence_ms`` of quiet,
    is the same samples and takes its text: the model is asked once. The speech and its first
    600 ms of quiet go in one frame while the model is idle (no partial can start before the
    pause, and a busy worker is not asked ahead), the rest only after that partial came: the
    order holds on any machine."""
    from websockets.sync.client import connect as sync_connect
    rate, headers = speech.rate, {"Authorization": f"Bearer {KEY}"}

    def whisper():
        status = httpx.get(server.base + "/v1/memory/status", headers=headers, timeout=30)
        return next(m for m in status.json()["models"] if m["id"] == "whisper")
    url = server.base.replace("http", "ws") + LIVE_PATH
    with sync_connect(url, additional_headers=headers) as ws:
        ws.send(json.dumps({"model": "whisper", "sample_rate": rate, "language": "en",
                            "silence_ms": 1500}))
        assert json.loads(ws.recv(timeout=30))["type"] == "ready"
        deadline = time.monotonic() + 60
        while (st := whisper())["active_leases"]:
            assert time.monotonic() < deadline, "whisper never got idle"
            time.sleep(0.05)
        served = st["total_requests_served"]
        ws.send(speech.pcm16(np.concatenate([np.zeros(int(0.3 * rate), np.float32),
                                             speech.fox, np.zeros(int(0.6 * rate), np.float32)])))
        partial = json.loads(ws.recv(timeout=120))
        assert partial["type"] == "partial" and partial["id"] == 0
        assert_fox(partial["text"])
        ws.send(speech.pcm16(np.zeros(int(1.5 * rate), np.float32)))
        final = json.loads(ws.recv(timeout=120))
        ws.send(json.dumps({"type": "end"}))
        assert json.loads(ws.recv(timeout=60))["type"] == "done"
    assert final["type"] == "final" and final["id"] == 0
    assert (final["text"], final["start"], final["end"]) == \
        (partial["text"], partial["start"], partial["end"])
    deadline = time.monotonic() + 30
    while (st := whisper())["active_leases"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert st["total_requests_served"] - served == 1


@real
@pytest.mark.slow
def test_live_hang_up_mid_utterance_releases_the_lease(server, speech):
    from websockets.sync.client import connect as sync_connect
    url = server.base.replace("http", "ws") + LIVE_PATH
    audio = speech.pcm16(np.concatenate([np.zeros(7200, np.float32), speech.fox,
                                         np.zeros(speech.rate, np.float32)]))
    with sync_connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(json.dumps({"model": "whisper", "sample_rate": speech.rate}))
        ws.recv(timeout=30)
        ws.send(audio)                       # one utterance, then hang up at once
    headers = {"Authorization": f"Bearer {KEY}"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = httpx.get(server.base + "/v1/memory/status", headers=headers).json()
        if next(m for m in status["models"] if m["id"] == "whisper")["active_leases"] == 0:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the session's lease outlived the hang-up")
    result = client(server).audio.transcriptions.create(model="whisper",
                                                        file=("fox.wav", speech.wav()))
    assert_fox(result.text)


@real
@pytest.mark.slow
def test_live_f32_at_16k(server, speech):
    import av
    from websockets.sync.client import connect as sync_connect
    resampler = av.AudioResampler(format="flt", layout="mono", rate=16000)
    frame = av.AudioFrame.from_ndarray(speech.fox[None, :], format="flt", layout="mono")
    frame.sample_rate = speech.rate
    samples = np.concatenate([f.to_ndarray()[0] for f in resampler.resample(frame)
                              + resampler.resample(None)])
    audio = np.concatenate([np.zeros(4800, np.float32), samples]).astype("<f4").tobytes()
    url = server.base.replace("http", "ws") + LIVE_PATH
    with sync_connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(json.dumps({"model": "whisper", "format": "f32", "partials": False}))
        json.loads(ws.recv(timeout=30))
        for piece in chunks(audio, 6400):
            ws.send(piece)
        ws.send(json.dumps({"type": "end"}))
        frames = [json.loads(ws.recv(timeout=60)) for _ in range(2)]
    assert [f["type"] for f in frames] == ["final", "done"]
    assert_fox(frames[0]["text"])
