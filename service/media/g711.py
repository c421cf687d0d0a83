"""G.711 telephone audio (8 kHz, one byte a sample): mu-law and A-law, to and from 16-bit
linear PCM, for the realtime route's ``audio/pcmu`` and ``audio/pcma`` formats. Pure numpy,
table driven: each direction's table is built once per process from the companding rule
(ITU-T G.711), so coding a buffer is one lookup per sample.

mu-law: the top 14 bits of the sample, magnitude clipped to 8158 and offset by 33, fall in
one of 8 octaves (the exponent); the 4 bits below the top bit are the mantissa; sign,
exponent and mantissa are sent inverted. A-law: the top 13 bits of the sample, magnitude in
8 segments (the two lowest the same width), the byte's even bits inverted. Decoding gives
the middle of the step the byte stands for.
"""
from __future__ import annotations

from functools import cache

import numpy as np

RATE = 8000
ULAW_BIAS = 0x84
ULAW_CLIP = 32635


def _top_bit(values: np.ndarray) -> np.ndarray:
    """floor(log2(v)) of positive integers."""
    return np.frexp(values.astype(np.float64))[1] - 1


def _ulaw_encode(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.int32) >> 2                                  # 14 bits
    sign = (v < 0).astype(np.int32) << 7
    mag = np.minimum(np.abs(v), ULAW_CLIP >> 2) + (ULAW_BIAS >> 2)   # 33 .. 8191
    exponent = _top_bit(mag) - 5                                 # 0 .. 7
    mantissa = (mag >> (exponent + 1)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8)


def _ulaw_decode(code: np.ndarray) -> np.ndarray:
    c = ~code.astype(np.int32) & 0xFF
    exponent, mantissa = (c >> 4) & 0x07, c & 0x0F
    mag = (((mantissa << 3) + ULAW_BIAS) << exponent) - ULAW_BIAS
    return np.where(c & 0x80, -mag, mag).astype(np.int16)


def _alaw_encode(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.int32) >> 3                                  # 13 bits
    negative = v < 0
    mag = np.where(negative, -v - 1, v)                          # 0 .. 4095
    segment = np.where(mag < 32, 0, _top_bit(np.maximum(mag, 1)) - 4)
    mantissa = np.where(segment < 2, mag >> 1, mag >> segment) & 0x0F
    return (((segment << 4) | mantissa) ^ np.where(negative, 0x55, 0xD5)).astype(np.uint8)


def _alaw_decode(code: np.ndarray) -> np.ndarray:
    a = code.astype(np.int32) ^ 0x55
    segment, mantissa = (a >> 4) & 0x07, a & 0x0F
    mag = np.where(segment == 0, (mantissa << 1) + 1,
                   ((mantissa << 1) + 33) << np.maximum(segment - 1, 0)) << 3
    return np.where(a & 0x80, mag, -mag).astype(np.int16)


@cache
def _tables(law: str) -> tuple[np.ndarray, np.ndarray]:
    """(encode: 65536 bytes indexed by the sample + 32768, decode: 256 int16)."""
    encode, decode = (_ulaw_encode, _ulaw_decode) if law == "ulaw" else \
        (_alaw_encode, _alaw_decode)
    return encode(np.arange(-32768, 32768)), decode(np.arange(256))


def _law(law: str) -> str:
    if law not in ("ulaw", "alaw"):
        raise ValueError(f"unknown G.711 law {law!r}")
    return law


def encode(samples: np.ndarray, law: str) -> bytes:
    """int16 samples as G.711 bytes (``law``: ulaw | alaw)."""
    table = _tables(_law(law))[0]
    return table[samples.astype(np.int32) + 32768].tobytes()


def decode(data: bytes, law: str) -> np.ndarray:
    """G.711 bytes as int16 samples."""
    return _tables(_law(law))[1][np.frombuffer(data, np.uint8)]
