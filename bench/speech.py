"""Time to first audio of a streamed speech response against the full non-streamed response,
through a real `hypnos serve` on the default lineup's Kokoro-82M int8 model.

Prints, as medians of --runs (after one warm-up request):
  - the non-streaming response time (request sent -> last byte), with the audio seconds and
    the real-time factor the server reported;
  - the streaming time to first audio (request sent -> first PCM bytes) and its total time;
  - the ratio time-to-first-audio / full response time (lower is better).

    python bench/speech.py [--runs 3] [--text "..."]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402

ONNX = "kokoro-82m/kokoro-v1.0.int8.onnx"
VOICES = "kokoro-82m/voices_ja.npz"
TEXT = ("Hypnos keeps every model in the right memory tier. A voice turn starts with a "
        "transcription, goes on with a chat answer, and ends with speech. Streaming the "
        "speech lets the first phrase play while the rest is still being made. That is why "
        "the time to first audio matters more than the total. This sentence is the last one.")
CONFIG = f"""
[[models]]
id = "kokoro"
modality = "text_to_speech"
engine = "onnx_runtime"
weights_path = "{ONNX}"
voices_path = "{VOICES}"
initial_tier = "tier1_gpu_vram"
"""


def full_response(srv: ServerProcess, text: str) -> tuple[float, float, float]:
    """(client seconds, audio seconds, server rtf) of one non-streamed WAV response."""
    started = time.perf_counter()
    r = srv.post("/v1/audio/speech", {"model": "kokoro", "input": text, "voice": "alloy"})
    elapsed = time.perf_counter() - started
    r.raise_for_status()
    return elapsed, float(r.headers["x-hypnos-audio-secs"]), float(r.headers["x-hypnos-rtf"])


def streamed(srv: ServerProcess, text: str) -> tuple[float, float]:
    """(seconds to the first PCM bytes, seconds to the last byte) of one streamed response."""
    body = {"model": "kokoro", "input": text, "voice": "alloy", "stream": True,
            "response_format": "pcm"}
    started = time.perf_counter()
    first = None
    with httpx.stream("POST", srv.base + "/v1/audio/speech", json=body, timeout=600) as r:
        r.raise_for_status()
        for chunk in r.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - started
    total = time.perf_counter() - started
    return (first if first is not None else total), total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--models-dir", default=str(ROOT / "models"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "hypnos.toml"
        config.write_text(f'models_dir = "{args.models_dir}"\n' + CONFIG)
        srv = ServerProcess(config, Path(tmp) / "server.log", ready_timeout=180)
        try:
            full_response(srv, "Warm up.")
            fulls = [full_response(srv, args.text) for _ in range(args.runs)]
            streams = [streamed(srv, args.text) for _ in range(args.runs)]
        finally:
            srv.stop()
    full = statistics.median(f[0] for f in fulls)
    audio = statistics.median(f[1] for f in fulls)
    rtf = statistics.median(f[2] for f in fulls)
    ttfa = statistics.median(s[0] for s in streams)
    total = statistics.median(s[1] for s in streams)
    print(f"text: {len(args.text)} characters, {audio:.2f} s of audio, runs: {args.runs}")
    print(f"non-streaming full response   {full * 1000:8.0f} ms   (server rtf {rtf:.3f})")
    print(f"streaming first audio         {ttfa * 1000:8.0f} ms")
    print(f"streaming last byte           {total * 1000:8.0f} ms")
    print(f"ratio first audio / full      {ttfa / full:8.3f}   ({full / ttfa:.1f}x sooner)")


if __name__ == "__main__":
    main()
