"""The Realtime route's pure parts (issue 42): client events and session.update read in
their GA and beta shapes, the conversation as a chat body, the response codec's events (each
validated against the openai SDK's server-event types), sentence splitting, resampling and
turn detection."""
import json

import numpy as np
import pytest
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from pydantic import TypeAdapter

from hypnos.engines.records import ChatDelta, ChatResult, ToolCall
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.errors import InvalidRequest
from hypnos.service.media.resample import (StreamResampler, float_to_pcm16, pcm16_to_float,
                                           resample)
from hypnos.service.media.turn_vad import WINDOW_MS, SileroStream, SpeechTurns, TurnDetector
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.codec import TurnEnd
from hypnos.service.wire.realtime_in import (Settings, Vad, apply_settings, chat_body,
                                             chat_messages, item_audio, parse_event,
                                             parse_item)
from hypnos.service.wire.realtime_out import (ResponseCodec, error_event, event,
                                              rate_limits_event)
from hypnos.service.wire.sentences import SentenceSplitter

EVENTS = TypeAdapter(RealtimeServerEvent)


def valid(frames):
    out = []
    for f in frames if isinstance(frames, list) else [frames]:
        EVENTS.validate_json(f)
        out.append(json.loads(f))
    return out


# ------------------------------------------------------------------ client events

@pytest.mark.parametrize("frame", ["not json", "[1]", '{"type": 3}', b"\x00\x01"])
def test_a_frame_that_is_no_event_is_refused_naming_type(frame):
    with pytest.raises(InvalidRequest) as e:
        parse_event(frame)
    assert e.value.param == "type"


def test_session_update_ga_shape():
    s = apply_settings(Settings(), {
        "type": "realtime", "instructions": "Be brief.", "output_modalities": ["text"],
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                            "transcription": {"model": "whisper"},
                            "turn_detection": {"type": "server_vad", "threshold": 0.7,
                                               "silence_duration_ms": 300,
                                               "prefix_padding_ms": 100}},
                  "output": {"voice": "af_heart"}},
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "f"}, "temperature": 0.2,
        "max_output_tokens": 64}, "session")
    assert s.instructions == "Be brief." and s.modalities == ("text",)
    assert s.vad == Vad(0.7, 300, 100) and s.voice == "af_heart" and s.transcription == "whisper"
    assert s.tool_choice == {"type": "function", "name": "f"} and s.max_output_tokens == 64
    assert apply_settings(s, {"audio": {"input": {"turn_detection": None}}}, "session").vad \
        is None
    assert apply_settings(s, {"max_output_tokens": "inf"}, "session").max_output_tokens is None


def test_session_update_beta_shape():
    s = apply_settings(Settings(), {
        "modalities": ["text", "audio"], "voice": "alloy", "input_audio_format": "pcm16",
        "output_audio_format": "pcm16", "input_audio_transcription": {"model": "whisper-1"},
        "turn_detection": None, "max_response_output_tokens": 100}, "session")
    assert s.modalities == ("audio",) and s.vad is None and s.max_output_tokens == 100
    assert s.transcription == "whisper-1"
    assert (s.input_format, s.output_format) == ("audio/pcm", "audio/pcm")


def test_g711_formats_in_both_shapes():
    s = apply_settings(Settings(), {"input_audio_format": "g711_ulaw",
                                    "output_audio_format": "g711_alaw"}, "session")
    assert (s.input_format, s.output_format) == ("audio/pcmu", "audio/pcma")
    s = apply_settings(s, {"audio": {"input": {"format": {"type": "audio/pcma"}},
                                     "output": {"format": {"type": "audio/pcmu",
                                                           "rate": 8000}}}}, "session")
    assert (s.input_format, s.output_format) == ("audio/pcma", "audio/pcmu")
    wire = valid(event("session.updated", session=s.session_wire("chat")))[0]["session"]
    assert wire["audio"]["input"]["format"] == {"type": "audio/pcma"}
    assert wire["audio"]["output"]["format"] == {"type": "audio/pcmu"}


@pytest.mark.parametrize("body,param", [
    ({"input_audio_format": "g722"}, "session.input_audio_format"),
    ({"audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16000}}}},
     "session.audio.input.format"),
    ({"audio": {"input": {"format": {"type": ["audio/pcm"]}}}}, "session.audio.input.format"),
    ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}},
     "session.audio.output.format"),
    ({"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 7}}}},
     "session.audio.input.turn_detection.threshold"),
    ({"turn_detection": {"type": "other"}}, "session.turn_detection.type"),
    ({"tools": [{"type": "function"}]}, "session.tools[0]"),
    ({"tool_choice": "sometimes"}, "session.tool_choice"),
    ({"output_modalities": ["video"]}, "session.output_modalities"),
    ({"max_output_tokens": 0}, "session.max_output_tokens"),
    ({"temperature": "hot"}, "session.temperature"),
])
def test_a_bad_session_field_is_named(body, param):
    with pytest.raises(InvalidRequest) as e:
        apply_settings(Settings(), body, "session")
    assert e.value.param == param


def test_session_object_is_the_sdks():
    for s in (Settings(), Settings(vad=None, modalities=("text",), max_output_tokens=9)):
        valid(event("session.created", session=s.session_wire("chat")))


def test_items_become_a_chat_body_with_tools():
    items = [parse_item({"type": "message", "role": "user", "content": [
                 {"type": "input_text", "text": "Weather?"},
                 {"type": "input_audio", "transcript": "In Paris."}]}),
             parse_item({"type": "function_call", "name": "w", "call_id": "c1",
                         "arguments": "{}"}),
             parse_item({"type": "function_call_output", "call_id": "c1", "output": "sun"})]
    assert all(i["id"].startswith("item_") for i in items)
    msgs = chat_messages("Be brief.", items)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[1]["content"] == "Weather? In Paris."
    assert msgs[2]["tool_calls"][0]["id"] == "c1" and msgs[3]["tool_call_id"] == "c1"
    s = Settings(tools=({"type": "function", "name": "w", "description": "",
                         "parameters": {"type": "object", "properties": {}}},),
                 tool_choice={"type": "function", "name": "w"}, max_output_tokens=32)
    params = parse_chat(chat_body("chat", s, items), LimitsConfig())
    assert params.request.tool_choice == "w" and params.request.max_tokens == 32
    assert params.stream


@pytest.mark.parametrize("item,param", [
    ({"type": "message", "role": "tool", "content": []}, "item.role"),
    ({"type": "message", "role": "user", "content": [{"type": "output_text"}]},
     "item.content[0].type"),
    ({"type": "function_call_output", "output": "x"}, "item.call_id"),
    ({"type": "image"}, "item.type"),
])
def test_a_bad_item_is_named(item, param):
    with pytest.raises(InvalidRequest) as e:
        parse_item(item)
    assert e.value.param == param


def test_a_user_audio_part_is_taken_out_to_be_heard():
    """A user input_audio part's base64 audio leaves the item (the session transcribes it
    into the part's transcript); a transcript given with it says what it says, and the audio
    is dropped; an assistant's audio is never kept; two parts with audio are refused."""
    said = parse_item({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Listen:"}, {"type": "input_audio", "audio": "AAA="}]})
    assert item_audio(said) == (1, "AAA=")
    assert said["content"][1] == {"type": "input_audio", "transcript": ""}
    assert item_audio(said) is None                     # taken once
    told = parse_item({"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": "AAA=", "transcript": "hello"}]})
    assert item_audio(told) is None and told["content"][0] == {"type": "input_audio",
                                                               "transcript": "hello"}
    spoken = parse_item({"type": "message", "role": "assistant", "content": [
        {"type": "audio", "audio": "AAA=", "transcript": "hi"}]})
    assert item_audio(spoken) is None and "audio" not in spoken["content"][0]
    twice = parse_item({"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": "AAA="}, {"type": "input_audio", "audio": "AAA="}]})
    with pytest.raises(InvalidRequest) as e:
        item_audio(twice)
    assert e.value.param == "item.content[1].audio"
    with pytest.raises(InvalidRequest) as e:
        parse_item({"type": "message", "role": "user",
                    "content": [{"type": "input_audio", "audio": 7}]})
    assert e.value.param == "item.content[0].audio"


# ------------------------------------------------------------------ the codec

def end(text="", tokens=5, finish="stop"):
    r = ChatResult(text=text, finish_reason=finish, prompt_tokens=7, completion_tokens=tokens)
    return TurnEnd([r], {}, 2048, 0.0, 1.0)


def test_codec_speaks_sentences_and_closes_with_what_was_heard():
    said = []
    codec = ResponseCodec("resp_1", audio=True, voice="alloy", speak=said.append)
    frames = codec.head(())
    for piece in ["Paris is the capital", ". It is large. And", " old"]:
        frames += codec.delta(0, ChatDelta(content=piece))
    frames += codec.tail(end())
    assert said == ["Paris is the capital.", "It is large.", "And old"]
    for s in said[:2]:                       # the third never got its audio out
        frames += codec.sentence(s)
        frames.append(codec.audio_delta(b"\x01\x00" * 2400))
    frames += codec.finish("cancelled", "turn_detected")
    evs = valid(frames)
    kinds = [e["type"] for e in evs]
    assert kinds[:4] == ["response.output_item.added", "conversation.item.created",
                         "conversation.item.added", "response.content_part.added"]
    assert evs[1]["item"]["id"] == evs[2]["item"]["id"] == evs[0]["item"]["id"]
    assert evs[1]["previous_item_id"] is None
    assert kinds[-3:] == ["response.output_item.done", "conversation.item.done",
                          "response.done"]
    assert "response.output_text.delta" not in kinds
    done = evs[-1]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["reason"] == "turn_detected"
    assert done["output"][0]["content"][0]["transcript"] == "Paris is the capital. It is large."
    assert done["usage"]["output_tokens"] == 5 and done["usage"]["input_tokens"] == 7
    deltas = "".join(e["delta"] for e in evs
                     if e["type"] == "response.output_audio_transcript.delta")
    assert deltas == done["output"][0]["content"][0]["transcript"]
    assert codec.spoken[1][0] == pytest.approx(100.0)      # 2400 samples at 24 kHz


def test_codec_text_and_a_call():
    codec = ResponseCodec("resp_2", audio=False, voice="alloy", previous="item_user",
                          max_tokens=40)
    frames = codec.delta(0, ChatDelta(content="Hi"))
    frames += codec.delta(0, ChatDelta(content=" there."))
    frames += codec.delta(0, ChatDelta(tool_call=ToolCall("get_weather", '{"city": "Oslo"}')))
    frames += codec.tail(end("Hi there.", finish="length"))
    frames += codec.finish(*codec.status())
    evs = valid(frames)
    assert "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta") == \
        "Hi there."
    args = [e for e in evs if e["type"] == "response.function_call_arguments.done"][0]
    assert args["name"] == "get_weather" and args["output_index"] == 1
    done = evs[-1]["response"]
    assert done["status"] == "incomplete" and done["max_output_tokens"] == 40
    assert done["status_details"]["reason"] == "max_output_tokens"
    assert [o["type"] for o in done["output"]] == ["message", "function_call"]
    # Each item entered the conversation (created, added) after the one before it, and was
    # done; the message is done last, when the response ends.
    message, call = (o["id"] for o in done["output"])
    for kind in ("conversation.item.created", "conversation.item.added",
                 "conversation.item.done"):
        assert [(e["item"]["id"], e["previous_item_id"]) for e in evs if e["type"] == kind] \
            == ([(call, message), (message, "item_user")] if kind.endswith("done") else
                [(message, "item_user"), (call, message)])


def test_codec_g711_audio_is_timed_by_its_own_rate():
    codec = ResponseCodec("resp_3", audio=True, voice="alloy", fmt="audio/pcmu")
    codec.delta(0, ChatDelta(content="One. Two. "))
    frames = codec.sentence("One.") + [codec.audio_delta(b"\xff" * 800)]   # 100 ms at 8 kHz
    frames += codec.sentence("Two.") + [codec.audio_delta(b"\xff" * 80)]
    frames += codec.finish("completed")
    evs = valid(frames)
    assert codec.spoken == [(0.0, "One."), (pytest.approx(100.0), "Two.")]
    assert evs[-1]["response"]["audio"]["output"]["format"] == {"type": "audio/pcmu"}


def test_rate_limits_event_is_the_sdks():
    ev = valid(rate_limits_event([
        {"name": "requests", "limit": 60, "remaining": 59, "reset_seconds": 60.0},
        {"name": "tokens", "limit": 1000, "remaining": 0, "reset_seconds": 3600.0}]))[0]
    assert [r["name"] for r in ev["rate_limits"]] == ["requests", "tokens"]
    assert valid(rate_limits_event([]))[0]["rate_limits"] == []


def test_error_event_is_the_sdks():
    ev = valid(error_event("bad", code="x", param="type", event_id="evt_1"))[0]
    assert ev["error"] == {"type": "invalid_request_error", "message": "bad", "code": "x",
                           "param": "type", "event_id": "evt_1"}


# ------------------------------------------------------------------ sentences

def test_sentences_complete_as_the_text_streams():
    sp = SentenceSplitter()
    out = []
    for piece in "Dr. Smith arrived, e.g. today! Was he late? Yes.\nNo".split(" "):
        out += sp.push(piece + " ")
    assert out == ["Dr. Smith arrived, e.g. today!", "Was he late?", "Yes."]
    assert sp.flush() == "No" and sp.flush() is None


def test_a_run_on_sentence_is_cut_at_a_comma():
    sp = SentenceSplitter(max_chars=60, first_words=0)
    assert sp.push("one two three four five, six seven eight nine ten eleven") == []
    out = sp.push(" twelve thirteen")
    assert out == ["one two three four five,"] and sp.flush().startswith("six")


def test_the_first_piece_ends_at_its_first_long_enough_clause():
    """Only the answer's first piece is cut at a clause (so the voice starts sooner), and
    only at a clause with FIRST_WORDS words that ends before the first sentence does."""
    sp = SentenceSplitter()
    out = []
    for word in ("Dr. Smith, a friend of mine, came by today, early. "
                 "He stayed, and we talked. Bye").split(" "):
        out += sp.push(word + " ")
    assert out == ["Dr. Smith, a friend of mine,", "came by today, early.",
                   "He stayed, and we talked."]
    assert sp.flush() == "Bye"
    sp = SentenceSplitter()
    assert sp.push("Yes, it is. Paris is the capital, ") == ["Yes, it is."]
    assert sp.push("of France. ") == ["Paris is the capital, of France."]
    assert " ".join(SentenceSplitter(first_words=0).push("One two three four, five six. ")) == (
        "One two three four, five six.")


def test_the_first_piece_may_end_before_a_word_that_opens_a_phrase():
    """As the words stream in, the first piece is cut before "located" once that word is
    whole, exactly as Kokoro's own splitter cuts the same text."""
    from hypnos.engines.kokoro import split_phrases
    text = "Paris is a historical city located in the Balkans, it says. It is old."
    sp, out = SentenceSplitter(), []
    for word in text.split(" "):
        out += sp.push(word + " ")
    assert out == ["Paris is a historical city", "located in the Balkans, it says.",
                   "It is old."]
    assert split_phrases(text)[:2] == out[:2]
    sp = SentenceSplitter()
    assert sp.push("Paris is a big city in") == []              # "in" may be "inside"
    assert sp.push("side the walls. ") == ["Paris is a big city inside the walls."]


# ------------------------------------------------------------------ audio

def test_pcm16_round_trip_and_resampling_keep_a_tone():
    t = np.arange(24000) / 24000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    back = pcm16_to_float(float_to_pcm16(tone))
    assert np.abs(back - tone).max() < 1e-4
    low = resample(tone, 24000, 16000)
    assert len(low) == 16000
    spectrum = np.abs(np.fft.rfft(low))
    assert abs(np.argmax(spectrum) * 16000 / len(low) - 440) < 2
    whole = StreamResampler(24000, 16000).push(tone)
    # each output waits only for the filter's half width after it
    assert 16000 - 2 * StreamResampler(24000, 16000).half <= len(whole) < 16000
    for step in (1, 7, 1000, 4801):           # the filter runs across chunks: any chunking
        rs = StreamResampler(24000, 16000)
        chunked = np.concatenate([rs.push(tone[i:i + step]) for i in range(0, 24000, step)])
        assert np.array_equal(chunked, whole)
    # centred: output n is the tone at n / 16000 s (past the first filter width)
    ideal = 0.5 * np.sin(2 * np.pi * 440 * np.arange(len(whole)) / 16000)
    assert np.abs(whole[24:] - ideal[24:]).max() < 1e-3
    assert np.sqrt(np.mean((whole[24:] - low[24:len(whole)]) ** 2)) < 1e-2
    above = (0.5 * np.sin(2 * np.pi * 10000 * t)).astype(np.float32)    # past 16 kHz's Nyquist
    assert np.abs(StreamResampler(24000, 16000).push(above)[24:]).max() < 0.02
    up = StreamResampler(8000, 16000).push(tone[::3])                    # G.711's rate, up
    assert np.abs(up[48:] - ideal[48:len(up)]).max() < 1e-3


def test_turn_detector_rules():
    windows = lambda ms: -(-ms // WINDOW_MS)  # noqa: E731
    det = TurnDetector(threshold=0.5, silence_ms=500, prefix_ms=64, min_speech_ms=96)
    assert det.push(np.array([0.1] * 10 + [0.9] + [0.1] * 5)) == []      # a click: no start
    speech = [0.9] * 20 + [0.2] * 5 + [0.9] * 5                          # a dip is no end
    events = det.push(np.array(speech + [0.1] * windows(500)))
    assert [e.kind for e in events] == ["started", "stopped"]
    assert events[0].ms == 16 * WINDOW_MS - 64
    assert events[1].ms == (16 + len(speech)) * WINDOW_MS


def test_turn_detector_reports_a_pause_where_its_stop_would_be():
    """A pause (``pause_ms`` of quiet) is reported at the position the stop would have; speech
    that resumes moves the stop, and each quiet run pauses once."""
    windows = lambda ms: -(-ms // WINDOW_MS)  # noqa: E731
    det = TurnDetector(threshold=0.5, silence_ms=500, prefix_ms=0, min_speech_ms=96,
                       pause_ms=200)
    speech = [0.9] * 20
    events = det.push(np.array(speech + [0.1] * windows(300) + speech +
                               [0.1] * windows(500)))
    assert [e.kind for e in events] == ["started", "paused", "paused", "stopped"]
    quiet = windows(300)
    assert events[1].ms == 20 * WINDOW_MS                       # the first speech's end
    assert events[2].ms == events[3].ms == (40 + quiet) * WINDOW_MS
    # A window between the two thresholds is no quiet: the run starts again after it.
    det = TurnDetector(threshold=0.5, silence_ms=500, pause_ms=200)
    events = det.push(np.array(speech + [0.1] * 5 + [0.4] + [0.1] * windows(500)))
    assert [e.kind for e in events] == ["started", "paused", "stopped"]
    assert events[1].ms == events[2].ms == 26 * WINDOW_MS
    # No pause when it would come with the stop or after it, nor without pause_ms.
    for pause in (500, 800, None):
        det = TurnDetector(threshold=0.5, silence_ms=500, pause_ms=pause)
        assert [e.kind for e in det.push(np.array(speech + [0.1] * windows(600)))] == \
            ["started", "stopped"]


def test_silero_hears_no_speech_in_silence_or_faint_noise_and_any_chunking_agrees():
    rng = np.random.default_rng(3)
    audio = np.concatenate([np.zeros(8000), rng.normal(0, 0.005, 16000)]).astype(np.float32)
    whole = SileroStream().push(audio)
    parts = SileroStream()
    chunked = np.concatenate([parts.push(audio[i:i + 700]) for i in range(0, len(audio), 700)])
    assert len(whole) == len(audio) // 512 and np.allclose(whole, chunked, atol=1e-5)
    assert whole.max() < 0.5


def test_no_periodic_partial_once_the_speech_goes_quiet():
    """The detector says how long the speech has been quiet; ``Hearing.listen`` starts no
    periodic partial from ``PAUSING_MS`` of it (the pause's own transcription is due)."""
    from hypnos.service.inference.realtime_hearing import PAUSING_MS, Hearing
    from hypnos.service.media.realtime_audio import InputBuffer
    det = TurnDetector(threshold=0.5, silence_ms=500)
    assert det.quiet_ms() == 0
    det.push(np.array([0.9] * 10 + [0.1] * 4))
    assert det.quiet_ms() == 4 * WINDOW_MS
    det.push(np.array([0.9]))
    assert det.quiet_ms() == 0
    asked = []

    def caller():                           # reached only when a partial may start
        asked.append(True)
        raise LookupError("asked")
    hearing = Hearing(caller, send=None)
    hearing.begin("item_1", 0.0)
    hearing.partial_at = (-10_000.0, -10.0)  # a partial is due on every rule of the clock
    speech = InputBuffer(24000)
    speech.append(b"\1\0" * 48000)
    hearing.listen("whisper", speech, responding=False, quiet_ms=PAUSING_MS)
    assert asked == [] and hearing.partial is None
    with pytest.raises(LookupError):
        hearing.listen("whisper", speech, responding=False, quiet_ms=PAUSING_MS - WINDOW_MS)
    assert asked == [True]


def test_speech_turns_place_windows_on_the_session_clock():
    turns = SpeechTurns(24000, TurnDetector(), start_ms=1000)
    assert turns.detector.index == 1000 // WINDOW_MS
    assert turns.push(b"\0" * 48000) == []             # a second of silence at 24 kHz
    assert turns.detector.index == 1000 // WINDOW_MS + 16000 // 512


def test_the_server_vad_computes_off_the_event_loop(monkeypatch):
    """Silero and the resampler block (and their first use in a process takes seconds on a
    busy machine): a session awaits them in a worker thread, so the loop serves on."""
    import asyncio
    import base64
    import threading

    from hypnos.service.inference import realtime
    from hypnos.service.inference.realtime_book import SessionInfo
    from hypnos.service.inference.realtime_response import Voices
    threads, sent, push = [], [], SpeechTurns.push

    def recorded(self, pcm):
        threads.append(threading.current_thread())
        return push(self, pcm)
    monkeypatch.setattr(SpeechTurns, "push", recorded)

    class Socket:
        async def send(self, frame):
            sent.append(json.loads(frame))

    async def session():
        deps = realtime.SessionDeps(voices=Voices("chat", None), transcriber=None,
                                    caller=lambda: None, idle_secs=60, max_buffer_secs=60)
        s = realtime.RealtimeSession(Socket(), deps, SessionInfo("chat"))
        for _ in range(3):
            await s._one(json.dumps({"type": "input_audio_buffer.append",
                                     "audio": base64.b64encode(b"\0" * 4800).decode()}))
        return threading.current_thread()
    loop_thread = asyncio.run(session())
    assert len(threads) == 3 and loop_thread not in threads
    assert sent == []                                   # no error, no turn in silence


@pytest.mark.parametrize("header,key", [
    ("realtime, openai-insecure-api-key.sk-1", "sk-1"),
    ("openai-insecure-api-key.sk-2,realtime", "sk-2"),
    ("realtime", None), ("", None), ("realtime, openai-insecure-api-key.", None)])
def test_a_browser_sends_its_key_as_a_subprotocol(header, key):
    from types import SimpleNamespace
    from hypnos.service.http.layers import subprotocol_key
    assert subprotocol_key(SimpleNamespace(headers={"sec-websocket-protocol": header})) == key
