"""Turn detection for the realtime route: the Silero VAD that ships with faster-whisper
(``faster_whisper.vad``, its ONNX file inside the wheel: no download), run on a stream, and
`TurnDetector`, the pure rule that turns its speech probabilities into "speech started" and
"speech stopped" at positions in the session's audio. `SpeechTurns` chains them for one
session: wire-rate pcm16 in, turn events out.

`SileroStream` keeps the model's recurrent state and the last 64 samples between calls, so
feeding a stream in any chunking gives the same probabilities as feeding it whole. It blocks
(onnxruntime, about a millisecond per second of audio), and so does `SpeechTurns`: run them in
a worker thread. The first in a process also loads the model (and imports faster_whisper):
`prepare` does that ahead.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from hypnos.service.media.resample import StreamResampler, pcm16_to_float

log = logging.getLogger("hypnos.realtime")
VAD_RATE = 16000
WINDOW = 512                    # samples per probability (32 ms at 16 kHz)
CONTEXT = 64                    # samples of the window before, as the model expects
WINDOW_MS = WINDOW * 1000 // VAD_RATE


def prepare() -> None:
    """Loads the Silero model, which a process's first `SpeechTurns` needs. Blocks. A
    failure is left to that `SpeechTurns`, which raises it where it can be reported."""
    try:
        from faster_whisper.vad import get_vad_model
        get_vad_model()                              # cached: one ONNX session per process
    except Exception:  # noqa: BLE001
        log.debug("the Silero VAD did not load ahead", exc_info=True)


class SileroStream:
    """Speech probabilities, one per 512-sample window of 16 kHz audio."""

    def __init__(self) -> None:
        from faster_whisper.vad import get_vad_model
        self.session = get_vad_model().session       # one ONNX session per process
        self.h = np.zeros((1, 1, 128), np.float32)
        self.c = np.zeros((1, 1, 128), np.float32)
        self.context = np.zeros(CONTEXT, np.float32)
        self.pending = np.zeros(0, np.float32)

    def push(self, samples: np.ndarray) -> np.ndarray:
        """The probabilities of the windows ``samples`` completes (float32 at 16 kHz)."""
        data = np.concatenate([self.pending, samples.astype(np.float32, copy=False)])
        count = len(data) // WINDOW
        self.pending = data[count * WINDOW:]
        if count == 0:
            return np.zeros(0, np.float32)
        windows = data[:count * WINDOW].reshape(count, WINDOW)
        before = np.concatenate([self.context[None, :], windows[:-1, -CONTEXT:]])
        self.context = windows[-1, -CONTEXT:].copy()
        batch = np.concatenate([before, windows], axis=1)
        out, self.h, self.c = self.session.run(None, {"input": batch, "h": self.h,
                                                      "c": self.c})
        return np.asarray(out, np.float32).reshape(-1)


@dataclass(frozen=True)
class TurnEvent:
    kind: str                   # started | paused | stopped
    ms: int                     # where, in the audio since the detector began


class TurnDetector:
    """Speech starts at the first window whose probability reaches ``threshold`` once
    ``min_speech_ms`` of such windows came in a row; it stops once ``silence_ms`` of windows
    stay below ``threshold - 0.15`` (hysteresis: a dip does not end a turn). Reported
    positions: a start is the first speech window's start less ``prefix_ms`` (never below
    0), a stop is the end of the last speech window.

    With ``pause_ms`` (shorter than ``silence_ms``), a quiet run that reaches it is reported
    as ``paused`` at the position its stop would have: the audio a stop would commit is
    known by then, and whether it is committed depends only on the speech not resuming
    before ``silence_ms``. Pure."""

    def __init__(self, threshold: float = 0.5, silence_ms: int = 500, prefix_ms: int = 300,
                 min_speech_ms: int = 96, pause_ms: int | None = None):
        self.threshold, self.low = threshold, max(0.0, threshold - 0.15)
        self.silence_windows = max(1, -(-silence_ms // WINDOW_MS))
        pause = None if pause_ms is None else max(1, -(-pause_ms // WINDOW_MS))
        self.pause_windows = pause if pause is not None and pause < self.silence_windows \
            else None
        self.speech_windows = max(1, -(-min_speech_ms // WINDOW_MS))
        self.prefix_ms = prefix_ms
        self.index = 0              # windows seen
        self.speaking = False
        self.run = 0                # speech windows in a row (not speaking) / quiet (speaking)
        self.last_speech = 0        # index of the last speech window

    def quiet_ms(self) -> int:
        """How long the speech in progress has been quiet (0 when none is)."""
        return self.run * WINDOW_MS if self.speaking else 0

    def push(self, probs: np.ndarray) -> list[TurnEvent]:
        events = []
        for p in probs:
            if not self.speaking:
                self.run = self.run + 1 if p >= self.threshold else 0
                if self.run >= self.speech_windows:
                    self.speaking, first = True, self.index - self.run + 1
                    self.run, self.last_speech = 0, self.index
                    events.append(TurnEvent("started",
                                            max(0, first * WINDOW_MS - self.prefix_ms)))
            elif p < self.low:
                self.run += 1
                if self.run == self.pause_windows:
                    events.append(TurnEvent("paused", (self.last_speech + 1) * WINDOW_MS))
                if self.run >= self.silence_windows:
                    self.speaking, self.run = False, 0
                    events.append(TurnEvent("stopped", (self.last_speech + 1) * WINDOW_MS))
            else:
                self.run, self.last_speech = 0, self.index
            self.index += 1
        return events


class SpeechTurns:
    """One session's server VAD: 16-bit PCM at ``rate`` in, the ``detector``'s events out,
    their positions on the session's clock (``start_ms``: where the first audio pushed
    begins). Blocks: one call at a time, in a worker thread."""

    def __init__(self, rate: int, detector: TurnDetector, start_ms: float):
        self.silero = SileroStream()
        self.resampler = StreamResampler(rate, VAD_RATE)
        self.detector = detector
        detector.index = int(start_ms // WINDOW_MS)

    def push(self, pcm: bytes) -> list[TurnEvent]:
        return self.detector.push(self.silero.push(self.resampler.push(pcm16_to_float(pcm))))
