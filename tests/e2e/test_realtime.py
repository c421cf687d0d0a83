"""GET /v1/realtime through a real `hypnos serve` on the default lineup's voice models, driven
by the official openai SDK's realtime client (issue 42): a spoken question heard and
answered in audio and text, an audio item heard, a cancel while the words are heard, a
forced function call round trip, barge-in, a bad event (an unknown transcription model too), the
server VAD on noise and silence, partial transcripts while the user speaks, the words heard
at a pause kept as the final transcription, a G.711 session,
the key's rate limits, and keys and Origin on the upgrade. Every frame the server sends is
validated against the SDK's server-event types, those it sends after a test's last expected
event too (``Session.drain``)."""
import base64
import json
import sys
import time

import httpx
import numpy as np
import openai
import pytest
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from pydantic import TypeAdapter
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from conftest import lineup_config, model_block, ROOT, require_smollm2
from hypnos.service.media import g711
from hypnos.service.media.resample import float_to_pcm16, pcm16_to_float, resample

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]

EVENTS = TypeAdapter(RealtimeServerEvent)
KEY = "sk-realtime-test"
LIMITED = "sk-realtime-limited"         # a user key with budgets (rate_limits.updated)
VOICE = (model_block("chat", "text_generation", context_len=4096),
         model_block("whisper", "speech_to_text"), model_block("kokoro", "text_to_speech"))
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    tmp = tmp_path_factory.mktemp("realtime")
    (tmp / "hypnos.toml").write_text(lineup_config(*VOICE))
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=180)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """A server with a key and room for one realtime session (the upgrade's refusals)."""
    require_smollm2()
    tmp = tmp_path_factory.mktemp("realtime-keys")
    (tmp / "hypnos.toml").write_text(lineup_config(
        model_block("chat", "text_generation", context_len=2048),
        server=f'api_keys = ["{KEY}"]', tables="[limits]\nrealtime_max_sessions = 1\n"
        "realtime_max_buffer_secs = 1\nrealtime_idle_timeout_secs = 6\n"
        f'[[server.keys]]\nkey = "{LIMITED}"\nrequests_per_minute = 100\n'
        "tokens_per_day = 100000\n"))
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def question(server):
    """"What is the capital of France?" as 24 kHz pcm16, spoken by the server itself."""
    r = httpx.post(server.base + "/v1/audio/speech", timeout=300, json={
        "model": "kokoro", "voice": "alloy", "input": "What is the capital of France?",
        "response_format": "pcm"})
    assert r.status_code == 200 and len(r.content) > 24000
    return r.content


def speech(server, text: str) -> bytes:
    """``text`` as 24 kHz pcm16, spoken by the server itself."""
    r = httpx.post(server.base + "/v1/audio/speech", timeout=300, json={
        "model": "kokoro", "voice": "alloy", "input": text, "response_format": "pcm"})
    assert r.status_code == 200 and len(r.content) > 24000
    return r.content


def client(base: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", websocket_base_url=base.replace(
        "http", "ws", 1) + "/v1", api_key=key, max_retries=0, timeout=300)


class Session:
    """The SDK's connection, each received frame validated and kept."""

    def __init__(self, conn):
        self.conn, self.seen = conn, []

    def recv(self) -> dict:
        raw = self.conn.recv_bytes()
        EVENTS.validate_json(raw)               # the SDK's own types accept every frame
        ev = json.loads(raw)
        self.seen.append(ev)
        return ev

    def until(self, kind: str, limit: int = 5000) -> dict:
        for _ in range(limit):
            ev = self.recv()
            if ev["type"] == kind:
                return ev
        raise AssertionError(f"no {kind} in {limit} events")

    def drain(self, quiet: float = 1.0) -> None:
        """Reads, validating each, the frames the server still sends, until ``quiet``
        seconds pass without one (the test's last event is seldom the session's last)."""
        socket = self.conn._connection      # the SDK's websocket: recv_bytes takes no timeout
        while True:
            try:
                raw = socket.recv(timeout=quiet, decode=False)
            except TimeoutError:
                return
            EVENTS.validate_json(raw)
            self.seen.append(json.loads(raw))

    def send(self, event: dict) -> None:
        self.conn.send(event)

    def append(self, pcm: bytes, chunk: int = 9600) -> None:
        for i in range(0, len(pcm), chunk):
            self.send({"type": "input_audio_buffer.append",
                       "audio": base64.b64encode(pcm[i:i + chunk]).decode()})


def rms(pcm: bytes) -> float:
    x = np.frombuffer(pcm, "<i2").astype(np.float64) / 32768
    return float(np.sqrt(np.mean(x * x))) if len(x) else 0.0


def audio_of(events: list[dict], rid: str) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in events
                    if e["type"] == "response.output_audio.delta" and e["response_id"] == rid)


def ended_or_cut(done: dict, limit: int) -> bool:
    """A response that completed, or one cut at ``limit`` output tokens that says so."""
    if done["status"] == "completed":
        return done.get("status_details") is None
    return (done["status"] == "incomplete"
            and done["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
            and done["usage"]["output_tokens"] == limit)


def manual(s: Session, **session) -> None:
    s.until("session.created")
    s.send({"type": "session.update", "session": {
        "type": "realtime", "instructions": "Answer in one short sentence.",
        "max_output_tokens": 40, "audio": {"input": {"turn_detection": None}}, **session}})
    s.until("session.updated")


def test_spoken_question_is_heard_and_answered_in_audio_and_text(server, question):
    with client(server.base).realtime.connect(model="chat") as conn:
        s = Session(conn)
        manual(s)
        s.append(question)
        s.send({"type": "input_audio_buffer.commit"})
        item = s.until("input_audio_buffer.committed")["item_id"]
        heard = s.until("conversation.item.input_audio_transcription.completed")
        assert heard["item_id"] == item and "france" in heard["transcript"].lower()
        done_item = s.until("conversation.item.done")["item"]
        assert done_item["id"] == item
        assert done_item["content"][0]["transcript"] == heard["transcript"]
        # The user item was announced as created (beta) and added (GA), in that order.
        kinds = [(e["type"], e.get("item", {}).get("id")) for e in s.seen]
        assert kinds.index(("conversation.item.created", item)) + 1 == \
            kinds.index(("conversation.item.added", item))
        s.send({"type": "response.create"})
        created = s.until("response.created")["response"]
        done = s.until("response.done")["response"]
        # Whether the answer ends within the session's 40 tokens is the greedy path's
        # business: either it ended, or it was cut there and says so.
        assert done["id"] == created["id"] and ended_or_cut(done, 40), done
        assert created["max_output_tokens"] == done["max_output_tokens"] == 40  # the session's
        assert done["usage"]["output_tokens"] > 0 and done["usage"]["input_tokens"] > 0
        audio = audio_of(s.seen, done["id"])
        assert len(audio) > 24000 * 2 * 0.3 and rms(audio) > 0.01     # over 0.3 s, not silent
        said = [e for e in s.seen if e["type"] == "response.output_audio_transcript.done"]
        assert len(said) == 1 and said[0]["transcript"].strip()
        message = [o for o in done["output"] if o["type"] == "message"][0]
        assert message["content"][0]["transcript"] == said[0]["transcript"]
        kinds = [e["type"] for e in s.seen]
        assert kinds.index("response.output_item.added") < kinds.index(
            "response.content_part.added") < kinds.index("response.output_audio.delta") < \
            kinds.index("response.output_audio.done") < kinds.index("response.done")
        # The answer entered the conversation after the user's item, and was done.
        added = [e for e in s.seen if e["type"] == "conversation.item.added"
                 and e["item"]["id"] == message["id"]]
        assert added and added[0]["previous_item_id"] == item
        assert [e["item"]["status"] for e in s.seen if e["type"] == "conversation.item.done"
                and e["item"]["id"] == message["id"]] == [done["status"]]
        # No key, no limits: rate_limits.updated says none applies (after response.created,
        # and again once the response is done).
        assert s.until("rate_limits.updated")["rate_limits"] == []
        assert [e["rate_limits"] for e in s.seen if e["type"] == "rate_limits.updated"] == \
            [[], []]
        # The same conversation, answered in text.
        s.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Say it again."}]}})
        s.until("conversation.item.done")
        s.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
        done = s.until("response.done")["response"]
        deltas = "".join(e["delta"] for e in s.seen if e["type"] == "response.output_text.delta"
                         and e["response_id"] == done["id"])
        text = [e for e in s.seen if e["type"] == "response.output_text.done"][-1]["text"]
        assert done["status"] in ("completed", "incomplete") and deltas == text and text.strip()
        assert not audio_of(s.seen, done["id"])
        s.drain()
    flows = server.status()["latency"]["workflows"]
    assert flows["realtime_first_audio"]["count"] >= 1
    assert flows["realtime_turn"]["count"] >= 2 and flows["realtime_first_audio"]["p50"] > 0


def test_forced_function_call_round_trip(server):
    with client(server.base).realtime.connect(model="chat") as conn:
        s = Session(conn)
        manual(s, tools=[WEATHER], output_modalities=["text"],
               tool_choice={"type": "function", "name": "get_weather"})
        s.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]}})
        s.send({"type": "response.create"})
        args = s.until("response.function_call_arguments.done")
        assert args["name"] == "get_weather" and isinstance(json.loads(args["arguments"]), dict)
        done = s.until("response.done")["response"]
        calls = [o for o in done["output"] if o["type"] == "function_call"]
        assert done["status"] == "completed" and calls[0]["call_id"] == args["call_id"]
        s.send({"type": "conversation.item.create", "item": {
            "type": "function_call_output", "call_id": args["call_id"],
            "output": json.dumps({"city": "Paris", "sky": "sunny", "celsius": 21})}})
        s.until("conversation.item.done")
        s.send({"type": "response.create", "response": {"tool_choice": "none"}})
        done = s.until("response.done")["response"]
        assert done["status"] in ("completed", "incomplete")     # max_output_tokens may end it
        assert [o["type"] for o in done["output"]] == ["message"]
        s.drain()


def test_barge_in_cancels_the_answer_and_keeps_what_was_said(server, question):
    with client(server.base).realtime.connect(model="chat") as conn:
        s = Session(conn)
        manual(s, max_output_tokens=300,
               instructions="Tell long stories, many sentences, with every detail.")
        # Whether an answer is still being spoken when the speech is heard depends on how
        # long the model's answer is (its greedy path): a turn whose answer ended first
        # tests nothing, so the user asks again (at most three turns).
        for turn in range(3):
            s.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{
                    "type": "input_text", "text": "Tell me a long story about a dragon."}]}})
            s.send({"type": "response.create"})
            rid = s.until("response.created")["response"]["id"]
            s.until("response.output_audio.delta")
            if turn == 0:
                s.send({"type": "session.update", "session": {"type": "realtime", "audio": {
                    "input": {"turn_detection": {"type": "server_vad",
                                                 "create_response": False}}}}})
            s.append(question)                           # the user talks over the answer
            done = s.until("response.done")["response"]
            assert done["id"] == rid
            if done["status"] == "cancelled":
                break
            assert ended_or_cut(done, 300)               # it ended before the speech
            s.append(b"\0" * 48000)                      # end that turn, ask again
            s.until("input_audio_buffer.speech_stopped")
        else:
            raise AssertionError("no answer was still going when the user spoke")
        assert done["status_details"]["reason"] == "turn_detected"
        kinds = [e["type"] for e in s.seen]
        assert kinds.index("input_audio_buffer.speech_started") < len(kinds) - 1
        sent = "".join(e["delta"] for e in s.seen
                       if e["type"] == "response.output_audio_transcript.delta"
                       and e["response_id"] == rid)
        message = [o for o in done["output"] if o["type"] == "message"][0]
        assert message["status"] == "incomplete"
        assert message["content"][0]["transcript"] == sent      # truncated to what was sent
        s.append(b"\0" * 48000)                          # a second of silence ends the turn
        s.until("input_audio_buffer.speech_stopped")
        s.send({"type": "conversation.item.truncate", "item_id": message["id"],
                "content_index": 0, "audio_end_ms": 0})
        truncated = s.until("conversation.item.truncated")
        assert truncated["item_id"] == message["id"]
        after = s.seen[s.seen.index(next(e for e in s.seen if e["type"] == "response.done"
                                         and e["response"]["id"] == rid)):]
        assert not [e for e in after if e.get("response_id") == rid
                    and e["type"] == "response.output_audio.delta"]      # none after done
        s.drain()


def test_bad_events_get_error_events_and_the_socket_stays(server):
    with client(server.base).realtime.connect(model="chat") as conn:
        s = Session(conn)
        s.until("session.created")
        conn.send_raw("this is not json")
        assert s.until("error")["error"]["type"] == "invalid_request_error"
        s.send({"type": "no.such.event", "event_id": "evt_1"})
        err = s.until("error")["error"]
        assert err["event_id"] == "evt_1" and err["param"] == "type"
        s.send({"type": "session.update", "session": {"type": "realtime", "audio": {
            "input": {"turn_detection": {"type": "server_vad", "threshold": 7}}}}})
        assert s.until("error")["error"]["param"] == \
            "session.audio.input.turn_detection.threshold"
        s.send({"type": "input_audio_buffer.commit"})
        assert s.until("error")["error"]["code"] == "input_audio_buffer_commit_empty"
        s.send({"type": "response.cancel"})
        assert s.until("error")["error"]["code"] == "response_cancel_not_active"
        s.send({"type": "conversation.item.delete", "item_id": "nope"})
        assert s.until("error")["error"]["code"] == "item_not_found"
        # A transcription model the pool lacks (OpenAI's name) is refused, in either shape,
        # and the session keeps hearing with the pool's own.
        s.send({"type": "session.update", "session": {"type": "realtime", "audio": {
            "input": {"transcription": {"model": "whisper-1"}}}}})
        err = s.until("error")["error"]
        assert err["code"] == "model_not_found" and \
            err["param"] == "session.audio.input.transcription.model"
        s.send({"type": "session.update", "session": {
            "input_audio_transcription": {"model": "gpt-4o-transcribe"}}})
        assert s.until("error")["error"]["param"] == "session.input_audio_transcription.model"
        s.send({"type": "session.update", "session": {"type": "realtime", "voice": "alloy"}})
        updated = s.until("session.updated")["session"]
        assert updated["audio"]["output"]["voice"] == "alloy"
        assert updated["audio"]["input"]["transcription"]["model"] == "whisper"
        s.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}})
        item = s.until("conversation.item.done")["item"]["id"]
        s.send({"type": "conversation.item.delete", "item_id": item})
        assert s.until("conversation.item.deleted")["item_id"] == item
        s.drain()


def test_an_audio_item_is_heard_and_a_cancel_while_hearing_ends_the_response(server,
                                                                              question):
    """Audio in a conversation.item.create's input_audio part is transcribed into the item,
    as committed audio is; a response cancelled while it waits for the user's words still
    answers with response.created and response.done (status cancelled)."""
    with client(server.base).realtime.connect(model="chat") as conn:
        s = Session(conn)
        manual(s, output_modalities=["text"])
        s.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [
                {"type": "input_audio", "audio": base64.b64encode(question).decode()}]}})
        item = s.until("conversation.item.added")["item"]
        assert item["content"] == [{"type": "input_audio", "transcript": ""}]
        heard = s.until("conversation.item.input_audio_transcription.completed")
        assert heard["item_id"] == item["id"] and "france" in heard["transcript"].lower()
        done = s.until("conversation.item.done")["item"]
        assert done["id"] == item["id"] and done["content"][0]["transcript"] == \
            heard["transcript"]
        # Committed, answered and cancelled at once: the cancel reaches the response while
        # the commit's transcription runs (or, later, while it writes).
        s.append(question)
        s.send({"type": "input_audio_buffer.commit"})
        s.send({"type": "response.create"})
        s.send({"type": "response.cancel"})
        created = s.until("response.created")["response"]
        ended = s.until("response.done")["response"]
        assert ended["id"] == created["id"] and ended["status"] == "cancelled"
        assert ended["status_details"]["reason"] == "client_cancelled"
        s.send({"type": "response.create"})        # the session answers the next one
        again = s.until("response.done")["response"]
        assert again["id"] != created["id"] and again["status"] in ("completed", "incomplete")
        s.drain()


def test_server_vad_ignores_noise_and_silence_and_hears_speech(server, question):
    rng = np.random.default_rng(7)
    noise = (rng.normal(0, 0.01, 24000) * 32768).astype("<i2").tobytes()
    with client(server.base).realtime.connect(model="chat") as conn:
        s = Session(conn)
        s.until("session.created")
        s.send({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"], "max_output_tokens": 16,
            "audio": {"input": {"turn_detection": {
                "type": "server_vad", "threshold": 0.5, "silence_duration_ms": 500,
                "prefix_padding_ms": 300}}}}})
        s.until("session.updated")
        s.append(b"\0" * 48000 + noise)
        s.send({"type": "conversation.item.retrieve", "item_id": "none"})   # a marker
        s.until("error")
        assert not [e for e in s.seen if e["type"].startswith("input_audio_buffer.speech")]
        s.append(question + b"\0" * 48000)
        started = s.until("input_audio_buffer.speech_started")
        stopped = s.until("input_audio_buffer.speech_stopped")
        assert started["item_id"] == stopped["item_id"]
        assert 1500 <= started["audio_start_ms"] < stopped["audio_end_ms"] <= 2000 + \
            len(question) / 48 + 1000
        committed = s.until("input_audio_buffer.committed")
        assert committed["item_id"] == started["item_id"]
        heard = s.until("conversation.item.input_audio_transcription.completed")
        assert "france" in heard["transcript"].lower()
        done = s.until("response.done")["response"]         # create_response is on
        assert done["status"] in ("completed", "incomplete")
        s.drain()


def first(s: Session, kind: str) -> dict:
    """The first event of ``kind`` received so far."""
    return next(e for e in s.seen if e["type"] == kind)


def whisper_status(server) -> dict:
    return next(m for m in server.status()["models"] if m["id"] == "whisper")


def listening(conn, silence_ms: int) -> Session:
    """A text-only session with the server VAD (``silence_ms`` of quiet ends a turn) that
    transcribes turns but makes no answer."""
    s = Session(conn)
    s.until("session.created")
    s.send({"type": "session.update", "session": {
        "type": "realtime", "output_modalities": ["text"], "audio": {"input": {
            "turn_detection": {"type": "server_vad", "silence_duration_ms": silence_ms,
                               "create_response": False}}}}})
    s.until("session.updated")
    return s


def test_partial_transcripts_while_the_user_speaks(server):
    """With the server VAD, the speech so far is transcribed again after each second of new
    speech; the words two partials agree on go out as deltas, and the final transcription
    completes them (or, when it says otherwise, stands alone in `completed`). The client
    speaks as a microphone does, a second of audio a second, and waits for the model to be
    idle before each, so a partial is due and allowed every second or two of speech on any
    machine; what the partials say is the model's, so only their count and the deltas' rules
    are checked."""
    said = speech(server, "What is the capital of France, and how many people live in "
                          "Paris today?")
    second = 48000
    with client(server.base).realtime.connect(model="chat") as conn:
        s = listening(conn, silence_ms=800)
        s.append(b"\0" * (second // 2))
        served = whisper_status(server)["total_requests_served"]
        for i in range(0, len(said), second):
            started = time.monotonic()
            s.append(said[i:i + second])
            s.send({"type": "conversation.item.retrieve", "item_id": "none"})   # a marker:
            s.until("error")                                 # the audio was handled
            while whisper_status(server)["active_leases"]:
                time.sleep(0.05)
            time.sleep(max(0.0, started + 1 - time.monotonic()))     # in real time
        s.append(b"\0" * (3 * second // 2))
        heard = s.until("conversation.item.input_audio_transcription.completed")
        item = first(s, "input_audio_buffer.speech_started")["item_id"]
        assert first(s, "input_audio_buffer.committed")["item_id"] == item
        assert heard["item_id"] == item and "france" in heard["transcript"].lower()
        assert whisper_status(server)["total_requests_served"] - served >= 2   # a partial
        s.drain()
    deltas = [e for e in s.seen if e["type"] ==
              "conversation.item.input_audio_transcription.delta" and e["item_id"] == item]
    assert deltas and s.seen.index(deltas[-1]) < s.seen.index(heard)
    joined = "".join(e["delta"] for e in deltas)
    words = joined.split()
    if heard["transcript"].split()[:len(words)] == words:     # the final agreed
        assert joined == heard["transcript"]


def test_a_pause_is_heard_before_the_stop_and_the_stop_keeps_its_words(server, question):
    """After 200 ms of quiet the speech so far is transcribed; when the stop (here 1.2 s of
    quiet) commits that very audio, the words heard at the pause are the final transcription,
    and the model is not asked again. The question and its first 300 ms of quiet go in one
    append (so no partial can start before the pause) once the model is loaded and idle (a
    busy model is not asked at a pause), and the rest of the quiet only once the pause's
    transcription is done: that order holds on any machine."""
    with client(server.base).realtime.connect(model="chat") as conn:
        s = listening(conn, silence_ms=1200)
        deadline = time.monotonic() + 300       # the session's prefetch loads the model
        while (st := whisper_status(server))["current_tier"] == "tier3_nvme_ssd" or \
                st["active_leases"]:                 # busy: a pause is not transcribed
            assert time.monotonic() < deadline, "the speech_to_text model never got idle"
            time.sleep(0.05)
        served = st["total_requests_served"]
        quiet = question + b"\0" * 14400                  # 300 ms at 24 kHz
        s.append(quiet, chunk=len(quiet))
        s.send({"type": "conversation.item.retrieve", "item_id": "none"})   # a marker
        s.until("error")
        deadline = time.monotonic() + 300
        while whisper_status(server)["total_requests_served"] == served:
            assert time.monotonic() < deadline, "nothing was transcribed at the pause"
            time.sleep(0.05)
        assert not [e for e in s.seen if e["type"] == "input_audio_buffer.speech_stopped"]
        s.append(b"\0" * 72000)                          # 1.5 s more: the stop
        heard = s.until("conversation.item.input_audio_transcription.completed")
        assert first(s, "input_audio_buffer.speech_stopped")["item_id"] == heard["item_id"]
        assert "france" in heard["transcript"].lower()
        assert whisper_status(server)["total_requests_served"] - served == 1
        s.drain()


def test_g711_session_round_trip(server, question):
    """mu-law in (the beta's name), A-law out (the GA's): 8 kHz both ways."""
    ulaw = g711.encode(np.frombuffer(float_to_pcm16(resample(
        pcm16_to_float(question), 24000, 8000)), "<i2"), "ulaw")
    with client(server.base).realtime.connect(model="chat") as conn:
        s = Session(conn)
        manual(s, input_audio_format="g711_ulaw", max_output_tokens=24,
               audio={"input": {"turn_detection": None},
                      "output": {"format": {"type": "audio/pcma"}}})
        session = [e for e in s.seen if e["type"] == "session.updated"][-1]["session"]
        assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
        assert session["audio"]["output"]["format"] == {"type": "audio/pcma"}
        s.append(ulaw, chunk=1600)                          # 200 ms a frame
        s.send({"type": "input_audio_buffer.commit"})
        heard = s.until("conversation.item.input_audio_transcription.completed")
        assert "france" in heard["transcript"].lower()
        s.send({"type": "response.create"})
        done = s.until("response.done")["response"]
        assert done["status"] in ("completed", "incomplete"), done
        assert done["audio"]["output"]["format"] == {"type": "audio/pcma"}
        alaw = audio_of(s.seen, done["id"])
        assert len(alaw) > 8000 * 0.3                       # over 0.3 s at 8 kHz
        assert rms(g711.decode(alaw, "alaw").astype("<i2").tobytes()) > 0.01
        s.drain()


def test_rate_limits_report_the_keys_budgets(keyed):
    """A key with requests_per_minute and tokens_per_day sees them in rate_limits.updated:
    at the response's start, and after it with its tokens counted; an admin key (no budget)
    sees none."""
    with client(keyed.base, LIMITED).realtime.connect(model="chat") as conn:
        s = Session(conn)
        s.until("session.created")
        s.send({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"], "max_output_tokens": 8,
            "audio": {"input": {"turn_detection": None}}}})
        s.until("session.updated")
        s.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Say hello."}]}})
        s.send({"type": "response.create"})
        before = s.until("rate_limits.updated")["rate_limits"]
        done = s.until("response.done")["response"]
        after = s.until("rate_limits.updated")["rate_limits"]
        s.drain()
    limits = {r["name"]: r for r in before}
    assert set(limits) == {"requests", "tokens"}
    assert limits["requests"]["limit"] == 100 and limits["requests"]["remaining"] == 99
    assert 0 < limits["requests"]["reset_seconds"] <= 60
    assert limits["tokens"]["limit"] == 100000
    assert 0 < limits["tokens"]["reset_seconds"] <= 86400
    spent = done["usage"]["total_tokens"]
    assert spent > 0
    assert {r["name"]: r for r in after}["tokens"]["remaining"] == \
        limits["tokens"]["remaining"] - spent
    with connect(ws_url(keyed.base), open_timeout=30,
                 additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        assert frame(ws)["type"] == "session.created"
        ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Hi."}]}}))
        ws.send(json.dumps({"type": "response.create", "response": {
            "output_modalities": ["text"], "max_output_tokens": 4}}))
        while (ev := frame(ws, timeout=60))["type"] != "rate_limits.updated":
            pass
        assert ev["rate_limits"] == []
        while frame(ws, timeout=60)["type"] != "response.done":
            pass
    # The next test may open this server's one session only once this one is closed.
    while httpx.get(keyed.base + "/v1/memory/status", timeout=30, headers={
            "Authorization": f"Bearer {KEY}"}).json()["realtime"]["open"]:
        time.sleep(0.05)


def frame(ws, timeout: float | None = None) -> dict:
    """The next frame of a plain websocket, validated against the SDK's server events."""
    raw = ws.recv(timeout=timeout)
    EVENTS.validate_json(raw)
    return json.loads(raw)


def ws_url(base: str) -> str:
    return base.replace("http", "ws", 1) + "/v1/realtime?model=chat"


def test_keys_and_origin_on_the_upgrade(keyed):
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(keyed.base), open_timeout=30).close()
    assert refused.value.response.status_code == 401
    with connect(ws_url(keyed.base), open_timeout=30,
                 additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        assert frame(ws)["type"] == "session.created"
    # A browser's way: the key as a subprotocol; the server picks "realtime".
    with connect(ws_url(keyed.base), open_timeout=30, origin="http://localhost:5173",
                 subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"]) as ws:
        assert ws.subprotocol == "realtime"
        first = frame(ws)
        assert first["type"] == "session.created"
        # One session is the limit: a second is refused before the upgrade.
        with pytest.raises(InvalidStatus) as busy:
            connect(ws_url(keyed.base), open_timeout=30,
                    additional_headers={"Authorization": f"Bearer {KEY}"}).close()
        assert busy.value.response.status_code == 429
        status = httpx.get(keyed.base + "/v1/memory/status", timeout=30,
                           headers={"Authorization": f"Bearer {KEY}"}).json()
        assert status["realtime"]["open"] == 1
    with pytest.raises(InvalidStatus) as foreign:
        connect(ws_url(keyed.base), open_timeout=30, origin="https://evil.example",
                additional_headers={"Authorization": f"Bearer {KEY}"}).close()
    assert foreign.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as wrong:
        connect(keyed.base.replace("http", "ws", 1) + "/v1/realtime?model=nope",
                open_timeout=30, additional_headers={"Authorization": f"Bearer {KEY}"}).close()
    assert wrong.value.response.status_code == 404


def test_buffer_bound_and_idle_timeout(keyed):
    """limits.realtime_max_buffer_secs refuses audio past it, in a frame of any size up to
    OpenAI's (the socket stays); a session
    with no event for limits.realtime_idle_timeout_secs gets an error event, then a close."""
    with connect(ws_url(keyed.base), open_timeout=30, close_timeout=5,
                 additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        assert frame(ws)["type"] == "session.created"
        ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "audio": {"input": {"turn_detection": None}}}}))
        assert frame(ws)["type"] == "session.updated"
        # A frame over 1 MiB (Sanic's default bound; OpenAI allows 15 MiB) is read and
        # answered by the session's own bound.
        ws.send(json.dumps({"type": "input_audio_buffer.append",
                            "audio": base64.b64encode(b"\0" * 1_200_000).decode()}))
        err = frame(ws)
        assert err["error"]["code"] == "input_audio_buffer_full"
        second = base64.b64encode(b"\0" * 48000).decode()
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": second}))
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": second}))
        err = frame(ws)
        assert err["error"]["code"] == "input_audio_buffer_full"
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert frame(ws)["type"] == "input_audio_buffer.cleared"
        idle = frame(ws, timeout=30)          # nothing sent for 6 s
        assert idle["type"] == "error" and idle["error"]["code"] == "idle_timeout"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
