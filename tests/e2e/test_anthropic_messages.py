"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through the official
`anthropic` SDK against a real `hypnos serve`.

Models: the default chat model (Qwen2.5-Coder-0.5B, trained, Hermes tool calls); SmolLM2 with
a Qwen3-style thinking template ("thinker", plumbing for thinking blocks); SmolLM2 with a
tiny random-weight projector ("smol-vision": proves an image block reaches the vision path,
not that anything is seen). Assertions hold whatever the greedy path: shapes, event order,
counts that must agree, forced calls that must parse.
"""
from __future__ import annotations

import base64
import io
import json

import anthropic
import httpx
import pytest
from PIL import Image

from model_dirs import serve

KEY = "sk-anthropic-test"
# The 2026 SDK has no sampling arguments; the server still reads them from the body.
T0 = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "Current weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
CONFIG = """
[server]
api_keys = ["{key}"]

[[models]]
id = "qwen"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "qwen.gguf"
context_len = 4096

[[models]]
id = "thinker"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "thinker.gguf"
context_len = 2048

[[models]]
id = "smol-vision"
modality = "text_generation"
modalities = ["vision"]
engine = "ggml_llama"
weights_path = "smol.gguf"
aux_path = "tiny-mmproj.gguf"
context_len = 2048
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = serve(tmp_path_factory.mktemp("messages"), CONFIG.format(key=KEY), qwen=True,
                smol=True, thinker=True, vision=True)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_create_answers_in_content_blocks(client):
    msg = client.messages.create(model="qwen", max_tokens=24, extra_body=T0,
                                 system=[{"type": "text", "text": "Answer briefly.",
                                          "cache_control": {"type": "ephemeral"}}],
                                 messages=ask("Say hello."))
    assert msg.type == "message" and msg.role == "assistant" and msg.model == "qwen"
    assert msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.output_tokens > 0 and msg.usage.input_tokens > 0
    assert "hypnos_telemetry" in msg.model_extra


def test_max_tokens_and_stop_sequence_reasons(client):
    cut = client.messages.create(model="qwen", max_tokens=2, extra_body=T0,
                                 messages=ask("Write a long story about the sea."))
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2
    counted = client.messages.create(model="qwen", max_tokens=64, extra_body=T0,
                                     stop_sequences=["3"],
                                     messages=ask("Count from 1 to 10, one number a line."))
    assert counted.stop_reason == "stop_sequence" and counted.stop_sequence == "3"
    assert "3" not in counted.content[0].text


def test_count_tokens_agrees_with_the_prompt_the_model_read(client):
    messages = ask("How many tokens is this sentence?")
    counted = client.messages.count_tokens(model="qwen", messages=messages).input_tokens
    msg = client.messages.create(model="qwen", max_tokens=1, messages=messages)
    assert counted == msg.usage.input_tokens + msg.usage.cache_read_input_tokens
    longer = client.messages.count_tokens(
        model="qwen", messages=ask("How many tokens is this sentence? " * 4)).input_tokens
    assert longer > counted


def test_stream_follows_anthropic_event_order(client):
    with client.messages.stream(model="qwen", max_tokens=16, extra_body=T0,
                                messages=ask("Count to five.")) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[1] == "content_block_start" and "content_block_stop" in kinds
    assert kinds.index("message_delta") > kinds.index("content_block_stop")
    assert final.content[0].type == "text" and final.usage.output_tokens > 0
    assert final.stop_reason in ("end_turn", "max_tokens")


def test_forced_tool_call_and_tool_result_round_trip(client):
    """tool_choice any is the forced-call grammar: the call parses whatever the path."""
    first = client.messages.create(model="qwen", max_tokens=64, extra_body=T0,
                                   tools=[WEATHER], tool_choice={"type": "any"},
                                   messages=ask("What's the weather in Paris?"))
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "get_weather" and isinstance(use.input.get("city"), str)
    assert use.id.startswith("toolu_")
    reply = client.messages.create(
        model="qwen", max_tokens=48, extra_body=T0, tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=[*ask("What's the weather in Paris?"),
                  {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                    for b in first.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                "content": "Sunny, 23 degrees C"}]}])
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert reply.content[0].type == "text" and reply.content[0].text


def test_output_config_format_is_the_structured_output_grammar(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    msg = client.messages.create(
        model="qwen", max_tokens=48, extra_body=T0,
        output_config={"format": {"type": "json_schema", "schema": schema}},
        messages=ask("Give the city and population of Tokyo as JSON."))
    answer = json.loads(msg.content[0].text)
    assert set(answer) == {"city", "population"} and isinstance(answer["population"], int)


def test_named_tool_streams_input_json(client):
    with client.messages.stream(model="qwen", max_tokens=64, extra_body=T0, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"},
                                messages=ask("Weather for Oslo")) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_message()
    use = next(b for b in final.content if b.type == "tool_use")
    assert use.name == "get_weather" and "city" in use.input
    assert final.stop_reason == "tool_use" and "input_json" in kinds


def test_thinking_blocks_come_back_and_disabled_turns_them_off(client):
    on = client.messages.create(model="thinker", max_tokens=40, extra_body=T0,
                                thinking={"type": "enabled", "budget_tokens": 16},
                                messages=ask("Why is the sky blue?"))
    kinds = [b.type for b in on.content]
    assert kinds[0] == "thinking" and on.content[0].thinking
    off = client.messages.create(model="thinker", max_tokens=16, extra_body=T0,
                                 thinking={"type": "disabled"},
                                 messages=ask("Why is the sky blue?"))
    assert all(b.type != "thinking" for b in off.content)


def _png() -> str:
    img = Image.new("RGB", (32, 32), (200, 30, 30))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def test_an_image_block_reaches_the_vision_path(client):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": _png()}}
    msg = client.messages.create(model="smol-vision", max_tokens=4,
                                 messages=[{"role": "user", "content": [
                                     image, {"type": "text", "text": "What is this?"}]}])
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 20
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="qwen", max_tokens=4, messages=[
            {"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}])
    assert "vision" in refused.value.body["error"]["message"]


@pytest.mark.parametrize("body, fragment", [
    ({"model": "qwen", "messages": ask("hi")}, "max_tokens"),
    ({"model": "qwen", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope",
                                      "content": "x"}]}]}, "tool_use_id"),
    ({"model": "qwen", "max_tokens": 4, "messages": ask("hi"),
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "server tool"),
    ({"model": "qwen", "max_tokens": 4, "messages": ask("hi"),
      "thinking": {"type": "enabled"}}, "budget_tokens"),
])
def test_bad_requests_get_anthropic_envelope(server, body, fragment):
    resp = httpx.post(server.base + "/v1/messages", json=body, headers={"x-api-key": KEY},
                      timeout=60)
    assert resp.status_code == 400, resp.text
    err = resp.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert fragment in err["error"]["message"]


def test_auth_by_x_api_key_and_errors_in_anthropic_shape(server):
    body = {"model": "qwen", "max_tokens": 4, "messages": ask("hi")}
    bad = httpx.post(server.base + "/v1/messages", json=body, headers={"x-api-key": "nope"},
                     timeout=60)
    assert bad.status_code == 401
    assert bad.json()["error"]["type"] == "authentication_error"
    missing = httpx.post(server.base + "/v1/messages", json={**body, "model": "nope"},
                         headers={"authorization": f"Bearer {KEY}",
                                  "anthropic-version": "2023-06-01",
                                  "anthropic-beta": "prompt-caching-2024-07-31"}, timeout=60)
    assert missing.status_code == 404
    assert missing.json() == {"type": "error", "error": {
        "type": "not_found_error", "message": missing.json()["error"]["message"]}}
    chat = httpx.post(server.base + "/v1/chat/completions", json={"model": "nope",
                                                                  "messages": ask("hi")},
                      headers={"x-api-key": KEY}, timeout=60)
    assert chat.status_code == 404 and "type" not in chat.json()     # OpenAI's envelope there


def test_a_prompt_past_the_window_is_a_422_before_the_stream_starts(server):
    """The prompt is counted inside the lease, before any event is sent: a prompt past the
    model's window is the chat path's 422, in Anthropic's envelope."""
    body = {"model": "thinker", "max_tokens": 4, "stream": True,
            "messages": ask("word " * 9000)}
    resp = httpx.post(server.base + "/v1/messages", json=body, headers={"x-api-key": KEY},
                      timeout=120)
    assert resp.status_code == 422, resp.text
    assert resp.json()["type"] == "error"
    assert resp.json()["error"]["type"] == "invalid_request_error"
