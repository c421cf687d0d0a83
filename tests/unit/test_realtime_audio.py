"""The realtime route's audio and transcript parts (issue 42): G.711 mu-law and A-law coded
in numpy (known code points, every sample's round trip within its step, every code's), the
wire formats to and from 16-bit PCM, the input buffer on the session's clock, when a partial
transcription is due, and the partial-transcript deltas (appended text, never taken back;
the final one authoritative); an event's base64 audio decoded in pieces, the event loop
let run between them."""
import asyncio
import base64
import os

import numpy as np
import pytest

from hypnos.service.inference.realtime_hearing import partial_due
from hypnos.service.errors import InvalidRequest
from hypnos.service.media import g711, realtime_audio
from hypnos.service.media.realtime_audio import (InputBuffer, b64_pieces, decode_event_audio,
                                                 from_wire, to_wire)
from hypnos.service.media.resample import float_to_pcm16, pcm16_to_float
from hypnos.service.wire.realtime_in import PCM, PCMU, bytes_per_ms
from hypnos.service.wire.transcript_deltas import TranscriptDeltas

EVERY = np.arange(-32768, 32768).astype(np.int16)
CODES = bytes(range(256))


def codes(samples, law):
    return list(g711.encode(np.array(samples, np.int16), law))


# ------------------------------------------------------------------ G.711

def test_known_code_points():
    # Silence is 0xFF in mu-law (all bits inverted) and 0xD5 in A-law (even bits inverted);
    # the loudest samples take the top codes of their sign.
    assert codes([0, 32767, -32768, -4], "ulaw") == [0xFF, 0x80, 0x00, 0x7E]
    assert codes([0, 32767, -32768, -1], "alaw") == [0xD5, 0xAA, 0x2A, 0x55]
    assert g711.decode(bytes([0xFF, 0x7F]), "ulaw").tolist() == [0, 0]
    assert g711.decode(bytes([0x80, 0x00]), "ulaw").tolist() == [32124, -32124]
    assert g711.decode(bytes([0xD5, 0x55, 0xAA]), "alaw").tolist() == [8, -8, 32256]


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_every_sample_comes_back_within_its_step(law):
    back = g711.decode(g711.encode(EVERY, law), law).astype(np.int64)
    x = EVERY.astype(np.int64)
    err = np.abs(back - x)
    # A step is 1/16 of the segment's top for A-law (1/32 away from zero for mu-law, whose
    # steps start after its bias of 132), and the loudest samples are clipped to the top.
    bound = np.maximum(16, np.abs(x) / 16) if law == "alaw" else (np.abs(x) + 132) / 32 + 4
    assert (err <= bound).all()
    assert (np.sign(back) * np.sign(x) >= 0).all()          # never the wrong sign
    assert np.all(np.diff(g711.decode(g711.encode(EVERY, law), law)) >= 0)   # monotonic


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_every_code_decodes_to_a_sample_that_encodes_back(law):
    again = list(g711.encode(g711.decode(CODES, law), law))
    differ = [c for c in range(256) if again[c] != c]
    # mu-law has two zeros (+0 and -0); both decode to 0, which encodes as +0.
    assert differ == ([0x7F] if law == "ulaw" else [])


def test_an_unknown_law_is_refused():
    with pytest.raises(ValueError):
        g711.encode(np.zeros(1, np.int16), "g722")


# ------------------------------------------------------------------ wire formats

def tone(rate, secs=1.0, hz=440.0):
    t = np.arange(int(rate * secs)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@pytest.mark.parametrize("kind", ["audio/pcmu", "audio/pcma"])
def test_speech_rate_pcm_becomes_8khz_g711_and_back(kind):
    data = to_wire(float_to_pcm16(tone(24000)), 24000, kind)
    assert len(data) == 8000 and bytes_per_ms(kind) == 8
    back = pcm16_to_float(from_wire(data, kind))
    assert len(back) == 8000
    spectrum = np.abs(np.fft.rfft(back))
    assert abs(np.argmax(spectrum) * 8000 / len(back) - 440) < 2
    middle = slice(400, 7600)                  # the resampler's edges aside
    assert np.sqrt(np.mean((back[middle] - tone(8000)[middle]) ** 2)) < 0.02


def test_pcm_passes_through_at_its_own_rate():
    pcm = float_to_pcm16(tone(24000, 0.1))
    assert to_wire(pcm, 24000, "audio/pcm") == pcm
    assert from_wire(pcm + b"\x01", "audio/pcm") == pcm
    assert len(to_wire(float_to_pcm16(tone(16000, 0.1)), 16000, "audio/pcm")) == 2400 * 2


def test_input_buffer_keeps_the_session_clock():
    buf = InputBuffer(8000)
    buf.append(b"\0" * 16000)                  # 1 s at 8 kHz
    assert buf.held_ms == buf.received_ms == 1000
    buf.drop_before(400)
    assert (buf.start_ms, buf.held_ms) == (400, 600)
    buf.data[:] = bytes(range(256)) * 37 + bytes(128)    # 600 ms that are not all alike
    ahead = buf.before(700)                              # what cut(700) will return, kept
    assert (buf.start_ms, buf.held_ms) == (400, 600)
    head = buf.cut(700)
    assert head == ahead and len(head) == 300 * 16 and (buf.start_ms, buf.held_ms) == (700, 300)
    buf.convert(24000)                         # a new input format: same time, new rate
    assert buf.rate == 24000 and buf.held_ms == pytest.approx(300, abs=0.1)
    buf.append(b"\0" * 4800)                   # 100 ms at 24 kHz
    assert len(buf.take()) == pytest.approx(400 * 48, abs=4)
    assert (buf.start_ms, buf.held_ms, buf.received_ms) == (1100, 0, 1100)


# ------------------------------------------------------------------ base64 in pieces

@pytest.mark.parametrize("size", [0, 1, 2, 3, 5, 6, 7, 12, 13, 25, 300])
def test_pieces_decode_what_one_decode_does(monkeypatch, size):
    monkeypatch.setattr(realtime_audio, "B64_PIECE", 8)
    raw = os.urandom(size)
    text = base64.b64encode(raw).decode()
    pieces = list(b64_pieces(text, "audio"))
    assert b"".join(pieces) == raw
    assert len(pieces) == max(1, -(-len(text) // 8))
    assert decode_event_audio(text, PCMU, "audio") == from_wire(raw, PCMU)


@pytest.mark.parametrize("text", [
    "AAAAAA==AAAA",         # padding that ends a piece that is not the last
    "AA==AAAAAAAA",
    "AAAAAAAAAA",           # not a multiple of 4
    "AAAAAAAAAA*A",         # a character outside the alphabet in the last piece
    "AA\nAAAAAAAAA",
    "AAAAAAAAAAAé",
])
def test_what_one_decode_refuses_the_pieces_refuse(monkeypatch, text):
    with pytest.raises(ValueError):
        base64.b64decode(text, validate=True)
    monkeypatch.setattr(realtime_audio, "B64_PIECE", 8)
    with pytest.raises(InvalidRequest, match="'item.content\\[0\\].audio' is not valid base64"):
        list(b64_pieces(text, "item.content[0].audio"))


def test_audio_that_is_not_text_is_refused():
    with pytest.raises(InvalidRequest, match="must be base64 audio") as info:
        decode_event_audio(["AAAA"], PCM, "audio")
    assert info.value.param == "audio"


def test_a_long_append_lets_the_event_loop_run_between_pieces(monkeypatch):
    monkeypatch.setattr(realtime_audio, "B64_PIECE", 64)
    raw = os.urandom(48 * 40)           # 2560 characters: 40 pieces

    async def main():
        ticks = 0
        decoding = True

        async def other():              # another session's task, say
            nonlocal ticks
            while decoding:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        pcm = await realtime_audio.decode_event_audio_yielding(
            base64.b64encode(raw).decode(), PCM, "audio")
        decoding = False
        await task
        return pcm, ticks

    pcm, ticks = asyncio.run(main())
    assert pcm == raw
    assert ticks >= 39                  # it ran between every two pieces


# ------------------------------------------------------------------ transcript deltas

def test_deltas_send_the_words_two_partials_agree_on():
    d = TranscriptDeltas()
    assert d.partial("What is") is None                 # one guess: nothing is stable yet
    assert d.partial("What is the cap") == "What is"
    assert d.partial("What is the capital?") == " the"
    assert d.partial("What is the capital of France") is None     # "capital?" changed
    assert d.partial("What is the capital of France?") == " capital of"
    assert d.final("What is the capital of France?") == " France?"
    assert d.sent == "What is the capital of France?".split()


def test_a_final_that_contradicts_the_deltas_adds_none():
    d = TranscriptDeltas()
    d.partial("Where is the")
    assert d.partial("Where is the  station") == "Where is the"
    assert d.final("Were is this station.") is None      # `completed` carries the truth
    fresh = TranscriptDeltas()
    assert fresh.final("  Hello   there. ") == "Hello there."   # no partial: one delta
    assert TranscriptDeltas().final("") is None


def test_a_later_disagreement_never_takes_words_back():
    d = TranscriptDeltas()
    sent = [d.partial(t) for t in ["one two", "one two three", "one too three",
                                   "one too three four", "one two three four five",
                                   "one two three four five six"]]
    said = "".join(s for s in sent if s)
    assert said == "one two three four five"
    assert "one two three four five six".startswith(said)


def test_a_partial_is_due_each_second_of_speech_heard_as_it_is_spoken():
    assert partial_due(1000, 1.0, 3000)
    assert not partial_due(900, 1.0, 3000)             # not a second of new audio yet
    assert partial_due(1000, 0.5, 3000)                # up to twice as fast as it plays
    assert not partial_due(3000, 0.05, 3000)           # an upload at once: none
    assert not partial_due(1000, 1.0, 15001)           # past 15 s of speech: none
