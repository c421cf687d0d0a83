"""Whisper's encoder window: the engine's short window (`engines/whisper.py`: a clip of up to
9 s read in 10 s, for requests without timestamps) against faster-whisper called directly
(every window padded to 30 s).

Twenty spoken requests of 1-6 s and four runs of them of 10-17 s, made with the default
lineup's Kokoro voice, each at three levels of added white noise (the same noise for both
sides; the longer runs read 30 s on both, as a check), are transcribed by both in this
process, one after the other, on the same settings (CPU int8, beam 5, all cores). Prints
per noise level and side: the mean word error rate against the text spoken, how many clips
have any error, the clips whose words differ between the two sides, and the median seconds
per clip; then the ratio of the total times.

    python bench/whisper_window.py [--model whisper-tiny.en] [--noise 0,0.01,0.03]

The word error rate counts words as written: "12" for "twelve" is an error on both sides.
Synthesised speech is cleaner than a microphone's; the noise levels stand in for a room.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT  # noqa: E402

SAID = [
    "What is the capital of France?", "Turn off the lights in the kitchen.",
    "Remind me to call my sister at five o'clock tomorrow.",
    "How far is the moon from the earth?", "Play some quiet music.", "Yes.",
    "No, that is not what I meant.",
    "Can you explain how a bloom filter works and why it can give false positives?",
    "Set a timer for twelve minutes.", "What's the weather like in Berlin this weekend?",
    "Translate good morning into Spanish.", "Tell me about Paris.",
    "I would like to book a table for four people on Saturday evening, preferably near the "
    "window.", "Stop.",
    "Read me the first paragraph of the document again, a little slower this time please.",
    "Who wrote the novel Pride and Prejudice?", "Add milk, eggs and bread to my shopping list.",
    "What time is it in Tokyo right now?", "Thank you, that was helpful.",
    "Summarise the meeting notes from Tuesday and send them to the whole team by email."]
#: (first request, how many) joined into one longer clip each.
RUNS = ((0, 4), (4, 6), (10, 5), (12, 3))
RATE = 16000


def clips(models_dir: Path) -> list[tuple[str, np.ndarray]]:
    """(text, 16 kHz samples with 0.2 s of silence before and 0.3 s after) per request, then
    the longer runs."""
    from kokoro_onnx import Kokoro
    from scipy.signal import resample_poly
    folder = models_dir / "kokoro-82m"
    kokoro = Kokoro(str(folder / "kokoro-v1.0.int8.onnx"), str(folder / "voices_ja.npz"))
    out = []
    for text in SAID:
        samples, rate = kokoro.create(text, voice="jf_alpha", speed=1.0, lang="en-us")
        assert rate == 24000, rate
        audio = resample_poly(samples, 2, 3).astype(np.float32)
        out.append((text, np.concatenate([np.zeros(RATE // 5, np.float32), audio,
                                          np.zeros(RATE * 3 // 10, np.float32)])))
    for first, n in RUNS:
        part = out[first:first + n]
        out.append((" ".join(t for t, _ in part), np.concatenate([a for _, a in part])))
    return out


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def wer(said: str, heard: str) -> float:
    """Word error rate of ``heard`` against ``said`` (edit distance over words)."""
    ref, hyp = words(said), words(heard)
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            cost = min(row[j] + 1, row[j - 1] + 1, diag + (ref[i - 1] != hyp[j - 1]))
            diag, row[j] = row[j], cost
    return row[len(hyp)] / max(1, len(ref))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", default=str(ROOT / "models"))
    ap.add_argument("--model", default="whisper-tiny.en", help="a folder in --models-dir")
    ap.add_argument("--noise", default="0,0.01,0.03",
                    help="standard deviations of the added noise (full scale 1), comma-separated")
    args = ap.parse_args()
    from faster_whisper import WhisperModel

    from hypnos.engines.whisper import short_window_model, short_windows
    models_dir = Path(args.models_dir)
    folder = str(models_dir / args.model)
    device = dict(device="cpu", compute_type="int8", local_files_only=True)
    sides = {"30 s window (faster-whisper)": WhisperModel(folder, **device),
             "short window (Hypnos)": short_window_model()(folder, **device)}
    said = clips(models_dir)
    print(f"{args.model}: {len(said)} clips of "
          f"{min(len(a) for _, a in said) / RATE:.1f}-{max(len(a) for _, a in said) / RATE:.1f} s")
    totals = dict.fromkeys(sides, 0.0)
    for level in (float(x) for x in args.noise.split(",")):
        heard: dict[str, list[str]] = {}
        for name, model in sides.items():
            secs, texts = [], []
            for i, (_, audio) in enumerate(said):
                noise = np.random.default_rng(i).standard_normal(len(audio)) * level
                x = (audio + noise).astype(np.float32)
                started = time.perf_counter()
                segments, _ = model.transcribe(x, language="en", beam_size=5, vad_filter=False)
                with short_windows():       # as a request without timestamps
                    texts.append("".join(s.text for s in segments).strip())
                secs.append(time.perf_counter() - started)
            heard[name], totals[name] = texts, totals[name] + sum(secs)
            errors = [wer(t, h) for (t, _), h in zip(said, texts, strict=True)]
            print(f"noise {level:<5} {name:29} mean WER {statistics.mean(errors):.3f}   "
                  f"clips with an error {sum(e > 0 for e in errors):2}/{len(errors)}   "
                  f"median {statistics.median(secs) * 1000:4.0f} ms")
        full, short = heard.values()
        for (_, audio), a, b in zip(said, full, short, strict=True):
            if words(a) != words(b):
                print(f"    {len(audio) / RATE:4.1f} s  30 s: {a!r}\n{'':12}short: {b!r}")
    full_s, short_s = totals.values()
    print(f"time, short window / 30 s window (all clips, all levels): {short_s / full_s:.2f}")


if __name__ == "__main__":
    main()
