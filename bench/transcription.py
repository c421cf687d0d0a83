"""Transcription speed through a real `hypnos serve` against faster-whisper called directly.

Prints, for the default lineup's whisper model (tiny.en unless --weights says otherwise) on
the same WAV file (made with the default lineup's Kokoro voice unless --audio names one):
  - the server's real-time factor: wall seconds of POST /v1/audio/transcriptions (multipart
    upload, decode, lease, engine, response) per audio second, median of --runs, after one
    warm-up request that loads the model; and the engine's own rtf from hypnos_telemetry;
  - faster-whisper's rtf called directly in this process on the same file with the same
    settings (CPU int8 or CUDA float16, beam 5, all cores, and the engine's encoder window
    for a request without timestamps: `bench/whisper_window.py` measures that window against
    faster-whisper's own), after one warm-up;
  - the ratio server / direct (1.0 = no overhead). The server is stopped before the direct
    runs, so the two never compete for cores.

    python bench/transcription.py [--runs 5] [--audio clip.wav]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402

PASSAGE = ("The quick brown fox jumps over the lazy dog. A local server keeps its models in "
           "three tiers of memory and moves them on demand. Speech goes in, text comes out, "
           "and every answer says how long the work took.")


def synthesize(models_dir: Path) -> bytes:
    """A WAV of PASSAGE spoken by the default lineup's Kokoro model."""
    from kokoro_onnx import Kokoro
    folder = models_dir / "kokoro-82m"
    kokoro = Kokoro(str(folder / "kokoro-v1.0.int8.onnx"), str(folder / "voices_ja.npz"))
    samples, rate = kokoro.create(PASSAGE, voice="jf_alpha", speed=1.0, lang="en-us")
    from hypnos.service.media.audio_frames import wav_bytes
    return wav_bytes(samples, rate)


def audio_secs(wav_path: Path) -> float:
    from hypnos.engines.whisper import SAMPLE_RATE, decode_audio
    return len(decode_audio(wav_path.read_bytes())) / SAMPLE_RATE


def through_server(config: Path, log: Path, wav: Path, runs: int) -> tuple[list[float], list]:
    srv = ServerProcess(config, log, ready_timeout=120)
    try:
        def once():
            with wav.open("rb") as f:
                t0 = time.perf_counter()
                r = httpx.post(srv.base + "/v1/audio/transcriptions", timeout=600,
                               files={"file": (wav.name, f, "audio/wav")},
                               data={"model": "whisper", "language": "en"})
                secs = time.perf_counter() - t0
            r.raise_for_status()
            return secs, r.json()
        _, first = once()                     # loads the model
        print(f"  transcript: {first['text']!r}")
        results = [once() for _ in range(runs)]
    finally:
        srv.stop()
    return [s for s, _ in results], [b["hypnos_telemetry"]["engine"]["rtf"] for _, b in results]


def direct(weights: Path, wav: Path, runs: int) -> list[float]:
    from hypnos.engines.whisper import cuda_available, short_window_model, short_windows
    WhisperModel = short_window_model()
    device = "cuda" if cuda_available() else "cpu"
    model = WhisperModel(str(weights), device=device,
                         compute_type="float16" if device == "cuda" else "int8",
                         cpu_threads=os.cpu_count() or 1, local_files_only=True)

    def once() -> float:
        t0 = time.perf_counter()
        segments, _info = model.transcribe(str(wav), language="en", beam_size=5)
        with short_windows():           # the server's json response has no timestamps
            list(segments)
        return time.perf_counter() - t0
    once()
    return [once() for _ in range(runs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--audio", type=Path, help="a WAV file (default: Kokoro speaks a passage)")
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("HYPNOS_MODELS_DIR", ROOT / "models")))
    ap.add_argument("--weights", default="whisper-tiny.en",
                    help="the CTranslate2 folder, relative to --models-dir")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wav = tmp / "clip.wav"
        wav.write_bytes(args.audio.read_bytes() if args.audio else synthesize(args.models_dir))
        secs = audio_secs(wav)
        config = tmp / "hypnos.toml"
        config.write_text(f'models_dir = "{args.models_dir}"\n[[models]]\nid = "whisper"\n'
                          'modality = "speech_to_text"\nengine = "faster_whisper"\n'
                          f'weights_path = "{args.weights}"\n')
        print(f"audio: {secs:.2f} s, {wav.stat().st_size} bytes; runs: {args.runs}; "
              f"cores: {os.cpu_count()}")
        server_secs, engine_rtf = through_server(config, tmp / "server.log", wav, args.runs)
        direct_secs = direct(args.models_dir / args.weights, wav, args.runs)
    server = statistics.median(server_secs) / secs
    alone = statistics.median(direct_secs) / secs
    print(f"server  rtf {server:.4f}  (wall, client side; engine telemetry rtf "
          f"{statistics.median(engine_rtf):.4f})")
    print(f"direct  rtf {alone:.4f}  (faster-whisper in this process)")
    print(f"ratio server / direct: {server / alone:.3f}")


if __name__ == "__main__":
    main()
