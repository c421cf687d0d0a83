"""A whole voice turn on the default lineup's voice models through a real `hypnos serve`:
speech -> transcription -> chat -> speech, with the next-stage and workflow headers."""
import io
import sys

import openai
import pytest

from conftest import lineup_config, model_block, ROOT, require_smollm2

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]

CONFIG = lineup_config(
    model_block("chat", "text_generation", context_len=4096),
    model_block("whisper", "speech_to_text"), model_block("kokoro", "text_to_speech"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    tmp = tmp_path_factory.mktemp("voice")
    (tmp / "hypnos.toml").write_text(CONFIG)
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


def test_voice_turn_with_workflow_and_next_model_headers(server):
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0,
                           timeout=300)
    turn = {"x-hypnos-workflow": "voice_turn/t-1"}
    # The user's question, spoken (the test's stand-in for a microphone).
    question = client.audio.speech.create(
        model="kokoro", voice="alloy", input="What is the capital of France?",
        extra_headers={**turn, "x-hypnos-next-model": "whisper"})
    wav = question.read()
    assert wav[:4] == b"RIFF" and len(wav) > 24000
    heard = client.audio.transcriptions.create(
        model="whisper", file=("question.wav", io.BytesIO(wav), "audio/wav"),
        extra_headers={**turn, "x-hypnos-next-model": "chat"})
    words = heard.text.lower()
    assert "capital" in words and "france" in words, heard.text
    answer = client.chat.completions.create(
        model="chat", max_tokens=24, temperature=0,
        messages=[{"role": "system", "content": "Answer in one short sentence."},
                  {"role": "user", "content": heard.text}],
        extra_headers={**turn, "x-hypnos-next-model": "kokoro"})
    reply = answer.choices[0].message.content
    assert reply.strip()
    spoken = client.audio.speech.create(
        model="kokoro", voice="alloy", input=reply,
        extra_headers={**turn, "x-hypnos-workflow-end": "true"})
    assert spoken.read()[:4] == b"RIFF"
    status = server.status()
    flow = status["latency"]["workflows"]["voice_turn"]
    assert flow["count"] == 1 and flow["p50"] > 0
    for route in ("/v1/audio/speech", "/v1/audio/transcriptions", "/v1/chat/completions"):
        assert status["latency"]["routes"][route]["count"] >= 1
