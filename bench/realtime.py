"""Realtime voice (GET /v1/realtime) against the same turns done as three sequential HTTP
calls, through a real `hypnos serve` on the default lineup's voice models (whisper-tiny.en,
SmolLM2-135M, Kokoro-82M), all warm.

For a one-sentence and a three-sentence answer, over --turns turns each, prints p50/p95 of:
  - realtime, from input_audio_buffer.commit to the first non-silent audio of the answer;
  - realtime with the server VAD, the question spoken in real time as from a microphone,
    from input_audio_buffer.speech_stopped to that audio, and to the question's transcript
    (...input_audio_transcription.completed);
  - sequential HTTP: transcribe, chat, then /v1/audio/speech streamed to its first
    non-silent byte, from the first request sent;
and the ratio realtime / sequential. It also transcribes each realtime answer's audio and
prints the share of the answer's transcript words heard back (a quality check).

    python bench/realtime.py [--turns 20] [--chat-weights smollm2-135m/...gguf]
                             [--kinds "one sentence,three sentences"]
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402

#: kind -> (the question spoken, the instructions, max output tokens). The three-sentence
#: question is one a small model answers at length (asked "the capital of France" in three
#: sentences, it says one); the median sentences of the answers are printed.
KINDS = {"one sentence": ("What is the capital of France?", "Answer in one short sentence.",
                          40),
         "three sentences": ("Tell me about Paris.", "Answer in exactly three sentences.", 120)}
LOUD = 0.005                # RMS of a chunk that counts as heard


def config(models: str, chat: str) -> str:
    return f"""models_dir = "{models}"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "{chat}"
context_len = 4096
[[models]]
id = "whisper"
modality = "speech_to_text"
engine = "faster_whisper"
weights_path = "whisper-tiny.en"
[[models]]
id = "kokoro"
modality = "text_to_speech"
engine = "onnx_runtime"
weights_path = "kokoro-82m/kokoro-v1.0.int8.onnx"
voices_path = "kokoro-82m/voices_ja.npz"
"""


def loud(pcm: bytes) -> bool:
    x = np.frombuffer(pcm[:len(pcm) - len(pcm) % 2], "<i2").astype(np.float64) / 32768
    return bool(len(x)) and float(np.sqrt(np.mean(x * x))) > LOUD


def pcm_wav(pcm: bytes, rate: int = 24000) -> bytes:
    import wave
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return buf.getvalue()


def realtime_turn(client: openai.OpenAI, question: bytes, kind: str,
                  vad: bool) -> tuple[float, str, bytes, float]:
    """(seconds from commit / speech stop to first loud audio, transcript, answer audio,
    seconds from the same moment to the question's transcription)."""
    _, instructions, tokens = KINDS[kind]
    with client.realtime.connect(model="chat") as conn:
        turn = {"type": "server_vad", "silence_duration_ms": 500} if vad else None
        conn.send({"type": "session.update", "session": {
            "type": "realtime", "instructions": instructions, "max_output_tokens": tokens,
            "audio": {"input": {"turn_detection": turn}}}})
        if vad:         # a microphone: the question, then a second of quiet, in real time
            sender = threading.Thread(target=speak, args=(conn, question + b"\0" * 48000),
                                      daemon=True)
            sender.start()
        else:
            for i in range(0, len(question), 9600):
                conn.send({"type": "input_audio_buffer.append",
                           "audio": base64.b64encode(question[i:i + 9600]).decode()})
        start = None
        if not vad:
            conn.send({"type": "input_audio_buffer.commit"})
            conn.send({"type": "response.create"})
            start = time.perf_counter()
        first, heard, chunks, transcript = None, None, [], ""
        while True:
            ev = json.loads(conn.recv_bytes())
            kind_ = ev["type"]
            if kind_ == "input_audio_buffer.speech_stopped" and start is None:
                start = time.perf_counter()
            elif kind_ == "conversation.item.input_audio_transcription.completed":
                heard = time.perf_counter()
            elif kind_ == "response.output_audio.delta":
                pcm = base64.b64decode(ev["delta"])
                chunks.append(pcm)
                if first is None and loud(pcm):
                    first = time.perf_counter()
            elif kind_ == "response.output_audio_transcript.done":
                transcript = ev["transcript"]
            elif kind_ == "response.done":
                break
            elif kind_ == "error":
                raise RuntimeError(ev["error"])
        if vad:
            sender.join()
    assert start is not None and first is not None and heard is not None, "no answer audio"
    return first - start, transcript, b"".join(chunks), heard - start


def speak(conn, pcm: bytes, chunk_ms: int = 100) -> None:
    """Append 24 kHz pcm16 ``pcm`` as a microphone would: ``chunk_ms`` of it every
    ``chunk_ms``, on the clock."""
    step, began = 48 * chunk_ms, time.perf_counter()
    for n, i in enumerate(range(0, len(pcm), step)):
        time.sleep(max(0.0, began + n * chunk_ms / 1000 - time.perf_counter()))
        conn.send({"type": "input_audio_buffer.append",
                   "audio": base64.b64encode(pcm[i:i + step]).decode()})


def sequential_turn(srv: ServerProcess, question: bytes, kind: str) -> float:
    """Seconds from the transcription request to the first loud byte of streamed speech. The
    rest of the speech is read too, as a client playing it would: a stream left early still
    has its phrase in synthesis, which would slow the next turn measured."""
    _, instructions, tokens = KINDS[kind]
    start = time.perf_counter()
    heard = httpx.post(srv.base + "/v1/audio/transcriptions", timeout=600,
                       data={"model": "whisper"},
                       files={"file": ("q.wav", pcm_wav(question), "audio/wav")}).json()["text"]
    answer = srv.post("/v1/chat/completions", {
        "model": "chat", "max_tokens": tokens, "messages": [
            {"role": "system", "content": instructions},
            {"role": "user", "content": heard}]}).json()["choices"][0]["message"]["content"]
    body = {"model": "kokoro", "input": answer or ".", "voice": "alloy", "stream": True,
            "response_format": "pcm"}
    first = None
    with httpx.stream("POST", srv.base + "/v1/audio/speech", json=body, timeout=600) as r:
        for chunk in r.iter_raw():
            if first is None and loud(chunk):
                first = time.perf_counter() - start
    return time.perf_counter() - start if first is None else first


def heard_back(srv: ServerProcess, transcript: str, audio: bytes) -> float:
    """The share of the transcript's words the transcription of its audio gives back."""
    words = set(re.findall(r"[a-z']+", transcript.lower()))
    if not words:
        return 1.0
    text = httpx.post(srv.base + "/v1/audio/transcriptions", timeout=600,
                      data={"model": "whisper"},
                      files={"file": ("a.wav", pcm_wav(audio), "audio/wav")}).json()["text"]
    return len(words & set(re.findall(r"[a-z']+", text.lower()))) / len(words)


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--models-dir", default=str(ROOT / "models"))
    ap.add_argument("--chat-weights", default="smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="the answers measured, comma-separated (default: all)")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"--kinds: no kind named {unknown} (kinds: {', '.join(KINDS)})")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hypnos.toml"
        path.write_text(config(args.models_dir, args.chat_weights))
        srv = ServerProcess(path, Path(tmp) / "server.log", ready_timeout=300)
        try:
            client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused",
                                   websocket_base_url=srv.base.replace("http", "ws", 1) + "/v1")
            questions = {kind: srv.post("/v1/audio/speech", {
                "model": "kokoro", "input": q, "voice": "alloy",
                "response_format": "pcm"}).content for kind, (q, _, _) in KINDS.items()
                if kind in kinds}
            for kind, question in questions.items():                       # warm every model
                realtime_turn(client, question, kind, False)
                sequential_turn(srv, question, kind)
            for kind, question in questions.items():
                rt, vad, seq, quality, sentences, heard = [], [], [], [], [], []
                for _ in range(args.turns):
                    secs, transcript, audio, _ = realtime_turn(client, question, kind, False)
                    rt.append(secs)
                    quality.append(heard_back(srv, transcript, audio))
                    sentences.append(len(re.findall(r"[.!?]+(?:\s|$)", transcript.strip())))
                    secs, _, _, secs_heard = realtime_turn(client, question, kind, True)
                    vad.append(secs)
                    heard.append(secs_heard)
                    seq.append(sequential_turn(srv, question, kind))
                print(f"{kind}, {args.turns} turns:")
                for name, vals in (("realtime, from commit", rt),
                                   ("realtime, from VAD stop", vad),
                                   ("  its question heard by", heard),
                                   ("sequential HTTP", seq)):
                    print(f"  {name:26} p50 {p(vals, 50):7.0f} ms   p95 {p(vals, 95):7.0f} ms")
                ratio = statistics.median(rt) / statistics.median(seq)
                print(f"  ratio realtime / sequential (p50)  {ratio:.2f}")
                print(f"  answer words heard back in its audio  {statistics.mean(quality):.0%}")
                print(f"  sentences in an answer (median)  {statistics.median(sentences):g}")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
