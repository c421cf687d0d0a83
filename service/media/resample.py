"""16-bit PCM and sample-rate conversion for the realtime route: its wire audio is 24 kHz
mono pcm16; the VAD reads 16 kHz; an engine may speak at another rate. Pure numpy, and scipy
for `resample`."""
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
    """Resamples a stream chunk by chunk, the filter running across chunks: the output is the
    same in any chunking. A windowed-sinc filter centred on each output sample (so output
    ``n`` sits at input position ``n * src / dst``, no delay), numpy only: the realtime
    VAD's first audio never waits for scipy's import. Each output waits for the ``HALF``
    input samples after it (half a millisecond at 24 kHz). Cut below the lower Nyquist
    frequency: right for the VAD it feeds; `resample` is for audio meant to be heard."""

    ZEROS = 8                       # zero crossings of the sinc on each side

    def __init__(self, src: int, dst: int):
        g = gcd(src, dst)
        self.up, self.down = dst // g, src // g
        cut = min(1.0, dst / src)               # of the input's Nyquist frequency
        self.half = int(np.ceil(self.ZEROS / cut))
        taps = np.arange(-self.half + 1, self.half + 1)                 # k: input base + k
        frac = (np.arange(self.up) * self.down % self.up) / self.up     # by n*down % up
        x = frac[:, None] - taps[None, :]                                # output - input
        w = cut * np.sinc(cut * x) * np.cos(np.pi * x / (2 * self.half)) ** 2   # Hann
        w[np.abs(x) >= self.half] = 0.0
        self.weights = (w / w.sum(axis=1, keepdims=True)).astype(np.float32)
        self.taps = taps
        self.held = np.zeros(self.half, np.float32)    # input from position ``self.first``
        self.first = -self.half                         # (silence before the stream)
        self.next = 0                                   # the next output's index

    def push(self, samples: np.ndarray) -> np.ndarray:
        if self.up == self.down:
            return samples.astype(np.float32, copy=False)
        self.held = np.concatenate([self.held, samples.astype(np.float32, copy=False)])
        last = self.first + len(self.held) - 1          # the newest input's position
        # outputs whose taps (base - half + 1 .. base + half) have all come in
        end = ((last - self.half) * self.up + self.up - 1) // self.down + 1
        if end <= self.next:
            return np.zeros(0, np.float32)
        n = np.arange(self.next, end)
        base, phase = n * self.down // self.up, n * self.down % self.up
        rows = self.held[base[:, None] + self.taps[None, :] - self.first]
        out = np.einsum("ij,ij->i", rows, self.weights[phase])
        self.next = end
        keep = end * self.down // self.up - self.half + 1 - self.first   # the next's first tap
        self.held, self.first = self.held[keep:], self.first + keep
        return out.astype(np.float32, copy=False)
