"""The realtime route's audio: its wire formats (24 kHz pcm16, 8 kHz G.711 mu-law / A-law)
to and from 16-bit PCM, and `InputBuffer`, the session's uncommitted audio placed on the
session's clock; an event's base64 audio decoded. Pure: no I/O, no event loop."""
from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Iterator

import numpy as np

from hypnos.service.errors import InvalidRequest
from hypnos.service.media import g711
from hypnos.service.media.resample import float_to_pcm16, pcm16_to_float, resample
from hypnos.service.wire.realtime_in import FORMAT_RATES, PCM, PCMA, PCMU

LAWS = {PCMU: "ulaw", PCMA: "alaw"}


def from_wire(data: bytes, kind: str) -> bytes:
    """Audio of format ``kind`` as 16-bit PCM at the format's own rate (``FORMAT_RATES``)
    (pcm16: a trailing odd byte is dropped)."""
    if kind == PCM:
        return data[:len(data) - len(data) % 2]
    return g711.decode(data, LAWS[kind]).astype("<i2").tobytes()


B64_PIECE = 1 << 20
"""Base64 characters decoded at a time (a multiple of 4; a few milliseconds of a core): a
16 MiB append decoded whole held the event loop, every other session and request with it,
for about 100 ms."""


def b64_pieces(audio: object, param: str) -> Iterator[bytes]:
    """An event's base64 ``audio`` decoded ``B64_PIECE`` characters at a time, as strictly
    as one ``b64decode(validate=True)`` of the whole (padding only at the very end); an
    InvalidRequest naming ``param`` when it is not base64 text."""
    if not isinstance(audio, str):
        raise InvalidRequest(f"'{param}' must be base64 audio", param=param)
    inner = len(audio) - B64_PIECE          # pieces that start before this are not the last
    try:
        for at in range(0, max(len(audio), 1), B64_PIECE):
            piece = audio[at:at + B64_PIECE]
            if at < inner and "=" in piece:
                raise binascii.Error("padding before the end")
            yield base64.b64decode(piece, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"'{param}' is not valid base64", param=param) from None


async def decode_event_audio_yielding(audio: object, kind: str, param: str) -> bytes:
    """``decode_event_audio`` with the event loop let run between pieces (a 16 MiB frame is
    10 or more of them)."""
    parts = []
    for piece in b64_pieces(audio, param):
        parts.append(piece)
        await asyncio.sleep(0)
    return from_wire(b"".join(parts), kind)


def decode_event_audio(audio: object, kind: str, param: str) -> bytes:
    """An event's base64 ``audio`` of format ``kind`` as 16-bit PCM at the format's rate,
    in one go (the realtime session decodes ``b64_pieces`` itself, yielding between them)."""
    return from_wire(b"".join(b64_pieces(audio, param)), kind)


def to_wire(pcm: bytes, rate: int, kind: str) -> bytes:
    """16-bit PCM at ``rate`` (a speaker's) as audio of format ``kind``, resampled to the
    format's rate. One call filters its chunk alone: give whole phrases, not slivers."""
    if kind == PCM and rate == FORMAT_RATES[PCM]:
        return pcm[:len(pcm) - len(pcm) % 2]
    samples = resample(pcm16_to_float(pcm), rate, FORMAT_RATES[kind])
    if kind == PCM:
        return float_to_pcm16(samples)
    return g711.encode(np.round(np.clip(samples, -1.0, 32767 / 32768) * 32768), LAWS[kind])


class InputBuffer:
    """Uncommitted 16-bit PCM at ``rate``, from ``start_ms`` on the session's clock (the
    milliseconds of audio received since it opened, ``received_ms``)."""

    def __init__(self, rate: int):
        self.rate = rate
        self.data = bytearray()
        self.start_ms = 0.0
        self.received_ms = 0.0

    def ms(self, nbytes: int) -> float:
        """How long ``nbytes`` of this buffer play."""
        return nbytes / 2 / self.rate * 1000

    def _bytes(self, ms: float) -> int:
        return max(0, int(ms * self.rate / 1000)) * 2

    @property
    def held_ms(self) -> float:
        return self.ms(len(self.data))

    def append(self, pcm: bytes) -> None:
        self.data += pcm
        self.received_ms += self.ms(len(pcm))

    def drop_before(self, ms: float) -> None:
        """Forget the audio before ``ms`` (session clock)."""
        nbytes = self._bytes(ms - self.start_ms)
        del self.data[:nbytes]
        self.start_ms += self.ms(nbytes)

    def before(self, ms: float) -> bytes:
        """The audio before ``ms``, as ``cut(ms)`` would return it; the buffer keeps it."""
        return bytes(self.data[:self._bytes(ms - self.start_ms)])

    def cut(self, ms: float) -> bytes:
        """The audio before ``ms``; what follows stays, the buffer now starting at ``ms``."""
        nbytes = self._bytes(ms - self.start_ms)
        audio, self.data = bytes(self.data[:nbytes]), self.data[nbytes:]
        self.start_ms = ms
        return audio

    def take(self) -> bytes:
        """All the audio; the buffer is empty, starting at what comes next."""
        audio, self.data = bytes(self.data), bytearray()
        self.start_ms = self.received_ms
        return audio

    def samples(self) -> np.ndarray:
        return pcm16_to_float(bytes(self.data))

    def convert(self, rate: int) -> None:
        """Hold the audio at ``rate`` from now on (a new input format)."""
        if rate != self.rate:
            self.data = bytearray(float_to_pcm16(resample(self.samples(), self.rate, rate)))
            self.rate = rate
