"""Audio framing for live transcription: an energy VAD that cuts a PCM stream into
utterances at pauses, frame readers and a sample buffer. Pure: no I/O, no event loop."""
from __future__ import annotations

import io
import wave
from collections import deque

import numpy as np

# ---------------------------------------------------------------- audio helpers


class EnergyVad:
    """Cuts a mono stream into utterances at pauses. Pure: samples in, sample ranges out.

    A 30 ms frame is voiced when its energy is above both an absolute floor and the noise
    floor (the quietest frame of the last few seconds, this one included) plus a margin, so
    the first frame of a stream is never voiced: streams should start before the speaker.
    An utterance ends after ``silence_ms`` without a voiced frame, or when it reaches
    ``max_utterance_secs``.
    Utterances with less than ``min_speech_ms`` voiced are dropped (clicks, breaths).
    """

    FRAME_MS = 30

    def __init__(self, rate: int, *, silence_ms: int = 500, min_speech_ms: int = 150,
                 max_utterance_secs: float = 30.0, pre_pad_ms: int = 200,
                 post_pad_ms: int = 300, floor_db: float = -50.0, margin_db: float = 12.0,
                 noise_window_secs: float = 5.0):
        ms = rate / 1000
        self.frame = int(self.FRAME_MS * ms)
        self.silence, self.min_speech = int(silence_ms * ms), int(min_speech_ms * ms)
        self.max_utterance = int(max_utterance_secs * rate)
        self.pre_pad, self.post_pad = int(pre_pad_ms * ms), int(post_pad_ms * ms)
        self.floor_db, self.margin_db = floor_db, margin_db
        frames = max(1, int(noise_window_secs * 1000 / self.FRAME_MS))
        self.noise: deque[float] = deque(maxlen=frames)
        self.position = 0                 # samples consumed as whole frames
        self.pending = np.zeros(0, np.float32)
        self.start: int | None = None     # current utterance start (padded) while speaking
        self.voiced = 0
        self.last_voiced_end = 0
        self.prev_end = 0

    @property
    def speaking(self) -> bool:
        return self.start is not None

    def keep_from(self) -> int:
        """The oldest sample a future utterance can still include."""
        return self.start if self.start is not None else max(self.prev_end,
                                                             self.position - self.pre_pad)

    def quiet(self) -> int:
        """Samples since the last voiced frame of the utterance in progress (0 when none)."""
        return self.position - self.last_voiced_end if self.start is not None else 0

    def settled(self) -> tuple[int, int] | None:
        """The utterance in progress as a pause would close it, once that is fixed: its end
        (``post_pad`` after the last voiced frame) has passed and it holds enough speech.
        None while nobody speaks, while the end may still move, or for a click."""
        if self.start is None or self.voiced < self.min_speech:
            return None
        end = self.last_voiced_end + self.post_pad
        return (self.start, end) if end <= self.position else None

    def push(self, samples: np.ndarray) -> list[tuple[int, int]]:
        """Feed samples; the utterances that closed, as (start, end) sample indices."""
        data = np.concatenate([self.pending, samples.astype(np.float32, copy=False)])
        n = len(data) // self.frame
        frames = data[: n * self.frame].reshape(n, self.frame) if n else data[:0].reshape(0, 1)
        self.pending = data[n * self.frame:]
        energy = 10 * np.log10(np.mean(np.square(frames, dtype=np.float64), axis=1) + 1e-12)
        return [cut for db in energy if (cut := self._step(float(db))) is not None]

    def flush(self) -> tuple[int, int] | None:
        """End of stream: close the utterance in progress, if any."""
        if self.start is None:
            return None
        end = min(self.last_voiced_end + self.post_pad, self.position + len(self.pending))
        return self._close(end)

    def _step(self, db: float) -> tuple[int, int] | None:
        frame_start = self.position
        self.position += self.frame
        self.noise.append(max(db, -90.0))
        voiced = db > max(self.floor_db, min(self.noise) + self.margin_db)
        if voiced:
            if self.start is None:
                self.start, self.voiced = max(self.prev_end, frame_start - self.pre_pad), 0
            self.voiced += self.frame
            self.last_voiced_end = self.position
        if self.start is None:
            return None
        if self.position - self.last_voiced_end >= self.silence:
            return self._close(min(self.last_voiced_end + self.post_pad, self.position))
        if self.position - self.start >= self.max_utterance:
            return self._close(self.position)
        return None

    def _close(self, end: int) -> tuple[int, int] | None:
        start, voiced = self.start, self.voiced
        self.start, self.prev_end = None, end
        return (start, end) if voiced >= self.min_speech else None


class PcmReader:
    """Little-endian pcm16 or f32 bytes -> float32 samples; a frame may split a sample."""

    def __init__(self, fmt: str):
        self.dtype, self.scale = ("<i2", 1 / 32768) if fmt == "pcm16" else ("<f4", 1.0)
        self.width = 2 if fmt == "pcm16" else 4
        self.rest = b""

    def push(self, data: bytes) -> np.ndarray:
        data = self.rest + data
        whole = len(data) // self.width * self.width
        self.rest = data[whole:]
        samples = np.frombuffer(data[:whole], self.dtype).astype(np.float32) * self.scale
        return np.clip(np.nan_to_num(samples), -1.0, 1.0)


class SampleBuffer:
    """The recent samples of a session, addressed by absolute sample index."""

    def __init__(self):
        self.chunks: deque[tuple[int, np.ndarray]] = deque()
        self.end = 0

    def append(self, samples: np.ndarray) -> None:
        if len(samples):
            self.chunks.append((self.end, samples))
            self.end += len(samples)

    def slice(self, start: int, end: int) -> np.ndarray:
        parts = [c[max(0, start - s): max(0, end - s)] for s, c in self.chunks
                 if s < end and s + len(c) > start]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def trim(self, keep_from: int) -> None:
        while self.chunks and self.chunks[0][0] + len(self.chunks[0][1]) <= keep_from:
            self.chunks.popleft()


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """16-bit mono WAV of float samples in [-1, 1]."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


# ---------------------------------------------------------------- the session
