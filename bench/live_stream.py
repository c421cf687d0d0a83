"""Live transcription (GET /v1/audio/stream) against the same utterances sent to
POST /v1/audio/transcriptions, through a real `hypnos serve` with whisper-tiny.en warm.

Each turn streams half a second of quiet, a spoken question (made by the server's own Kokoro)
and two seconds of quiet in 100 ms frames, on the clock, as a microphone would. Printed,
p50/p95 over --turns turns:
  - live: from the VAD's cut (``silence_ms`` after the last voiced frame; the final's ``end``
    is ``post_pad`` = 300 ms after it) to the final frame;
  - HTTP: the same utterance's samples (the final's start to end) posted as a WAV, from the
    request to the response: what a client that found the pause itself would wait;
and the ratio live / HTTP, the whisper calls per turn (partials included) and whether the
final's text came back from HTTP too.

    python bench/live_stream.py [--turns 12] [--silence-ms 500] [--verbose]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402
from realtime import config, p, pcm_wav  # noqa: E402

QUESTIONS = ("What is the capital of France?",
             "Tell me the name of the largest ocean on our planet, please.",
             "How many legs does a spider have, and how many does an ant have?")
RATE = 24000                # Kokoro's, sent as it is
POST_PAD_MS = 300           # EnergyVad's: the final ends this long after the last voiced frame
FRAME = RATE * 2 // 10      # 100 ms of pcm16


def served(srv: ServerProcess) -> int:
    return next(m for m in srv.get("/v1/memory/status")["models"]
                if m["id"] == "whisper")["total_requests_served"]


def live_turn(srv: ServerProcess, question: bytes, silence_ms: int) -> tuple[float, dict]:
    """(seconds from the VAD's cut to the final frame, the final)."""
    audio = b"\0" * RATE + question + b"\0" * (RATE * 4)     # 0.5 s, question, 2 s
    url = srv.base.replace("http", "ws", 1) + "/v1/audio/stream"
    with connect(url) as ws:
        ws.send(json.dumps({"model": "whisper", "sample_rate": RATE, "language": "en",
                            "silence_ms": silence_ms}))
        assert json.loads(ws.recv(timeout=60))["type"] == "ready"
        began = time.perf_counter()

        def microphone() -> None:
            for n, at in enumerate(range(0, len(audio), FRAME)):
                time.sleep(max(0.0, began + n / 10 - time.perf_counter()))
                ws.send(audio[at:at + FRAME])
        sender = threading.Thread(target=microphone)
        sender.start()
        while (frame := json.loads(ws.recv(timeout=120)))["type"] != "final":
            assert frame["type"] == "partial", frame
        arrived = time.perf_counter() - began
        sender.join()
        ws.send(json.dumps({"type": "end"}))
        while json.loads(ws.recv(timeout=60))["type"] != "done":
            pass
    cut = frame["end"] + (silence_ms - POST_PAD_MS) / 1000
    return arrived - cut, frame


def http_turn(srv: ServerProcess, question: bytes, final: dict) -> tuple[float, str]:
    """(seconds for POST /v1/audio/transcriptions of the final's samples, its text)."""
    audio = b"\0" * RATE + question + b"\0" * (RATE * 4)
    start, end = (round(final[k] * RATE) * 2 for k in ("start", "end"))
    began = time.perf_counter()
    text = httpx.post(srv.base + "/v1/audio/transcriptions", timeout=600,
                      data={"model": "whisper", "language": "en"},
                      files={"file": ("u.wav", pcm_wav(audio[start:end]), "audio/wav")}
                      ).json()["text"]
    return time.perf_counter() - began, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--silence-ms", type=int, default=500)
    ap.add_argument("--verbose", action="store_true", help="print each turn")
    ap.add_argument("--models-dir", default=str(ROOT / "models"))
    ap.add_argument("--chat-weights", default="smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf",
                    help="the config's chat model (not used; the config is bench/realtime.py's)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hypnos.toml"
        path.write_text(config(args.models_dir, args.chat_weights))
        srv = ServerProcess(path, Path(tmp) / "server.log", ready_timeout=300)
        try:
            questions = [srv.post("/v1/audio/speech", {
                "model": "kokoro", "input": q, "voice": "alloy",
                "response_format": "pcm"}).content for q in QUESTIONS]
            live_turn(srv, questions[0], args.silence_ms)                 # warm whisper
            live, http, calls, same = [], [], [], 0
            for n in range(args.turns):
                question = questions[n % len(questions)]
                before = served(srv)
                secs, final = live_turn(srv, question, args.silence_ms)
                time.sleep(0.3)                     # the session's last lease ends
                calls.append(served(srv) - before)
                live.append(secs)
                secs, text = http_turn(srv, question, final)
                http.append(secs)
                same += text.strip() == final["text"].strip()
                if args.verbose:
                    print(f"  turn {n}: live {live[-1] * 1000:.0f} ms, HTTP {secs * 1000:.0f}"
                          f" ms, {calls[-1]} calls: {final['text']}", flush=True)
            print(f"live transcription, {args.turns} turns, silence_ms {args.silence_ms}:")
            for name, vals in (("live, final after the VAD's cut", live),
                               ("HTTP, the same utterance", http)):
                print(f"  {name:32} p50 {p(vals, 50):6.0f} ms   p95 {p(vals, 95):6.0f} ms")
            ratio = statistics.median(live) / statistics.median(http)
            print(f"  ratio live / HTTP (p50)  {ratio:.2f}")
            print(f"  whisper calls per turn (partials included)  {calls}")
            print(f"  finals whose text HTTP gave too  {same} of {args.turns}")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
