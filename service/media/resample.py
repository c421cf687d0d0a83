"""16-bit PCM and sample-rate conversion for the realtime route: its wire audio is 24 kHz
mono pcm16; the VAD reads 16 kHz; an engine may speak at another rate. Pure numpy/scipy."""
from __future__ import annotations

from math import gcd

import numpy as np

WIRE_RATE = 24000


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Little-endian 16-bit samples as float32 in [-1, 1) (a trailing odd byte is dropped)."""
    usable = len(data) - len(data) % 2
    return np.frombuffer(data[:usable], "<i2").astype(np.float32) / 32768.0


def float_to_pcm16(samples: np.ndarray) -> bytes:
    """float samples, clipped to [-1, 1], as little-endian 16-bit PCM."""
    return (np.clip(samples, -1.0, 32767 / 32768) * 32768).astype("<i2").tobytes()


def resample(samples: np.ndarray, src: int, dst: int) -> np.ndarray:
    """``samples`` at ``src`` Hz, at ``dst`` Hz (polyphase filter; the same array when the
    rates are equal). Its length is ``round(len * dst / src)`` or one less."""
    if src == dst or len(samples) == 0:
        return samples.astype(np.float32, copy=False)
    from scipy.signal import resample_poly
    g = gcd(src, dst)
    return resample_poly(samples, dst // g, src // g).astype(np.float32)


def resample_pcm16(data: bytes, src: int, dst: int) -> bytes:
    """16-bit PCM at ``src`` Hz as 16-bit PCM at ``dst`` Hz."""
    if src == dst:
        return data
    return float_to_pcm16(resample(pcm16_to_float(data), src, dst))


class StreamResampler:
    """Resamples a stream chunk by chunk with a fixed ratio: each chunk's output length is
    exact over the stream (whole ``src/g`` blocks are converted, the rest waits for the next
    chunk), so positions in the output stay ``position * dst / src``. Each chunk is filtered
    alone, so the few samples at its edges differ slightly from resampling the whole stream:
    right for the VAD it feeds, not for audio meant to be heard."""

    def __init__(self, src: int, dst: int):
        g = gcd(src, dst)
        self.src, self.dst, self.block = src, dst, src // g
        self.rest = np.zeros(0, np.float32)

    def push(self, samples: np.ndarray) -> np.ndarray:
        if self.src == self.dst:
            return samples
        data = np.concatenate([self.rest, samples.astype(np.float32, copy=False)])
        whole = len(data) - len(data) % self.block
        self.rest = data[whole:]
        return resample(data[:whole], self.src, self.dst)
