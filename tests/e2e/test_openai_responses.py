"""OpenAI's Responses API (/v1/responses, GET / DELETE /v1/responses/{id}, GET
/v1/responses/{id}/input_items, /v1/responses/input_tokens) through the official `openai`
SDK's ``client.responses`` against a real `hypnos serve`.

Models: the default chat model (Qwen2.5-Coder-0.5B, trained, Hermes tool calls; two slots, so
a stored conversation binds one); SmolLM2 with a Qwen3-style thinking template ("thinker",
plumbing for reasoning items). Assertions hold whatever the greedy path: shapes, event order,
counts that must agree, forced calls that must parse, a prefix reused across a swap.
"""
from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from model_dirs import serve

KEY = "sk-responses-test"
T0 = {"temperature": 0}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
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
slots = 2

[[models]]
id = "thinker"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "thinker.gguf"
context_len = 2048
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = serve(tmp_path_factory.mktemp("responses"), CONFIG.format(key=KEY), qwen=True,
                thinker=True)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=600)


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.base + path, json=body, timeout=600,
                      headers={"authorization": f"Bearer {KEY}"})


def memory(server) -> dict:
    return httpx.get(server.base + "/v1/memory/status", timeout=60,
                     headers={"authorization": f"Bearer {KEY}"}).json()


def test_create_get_and_delete_a_stored_response(server, client):
    resp = client.responses.create(model="qwen", instructions="Answer briefly.",
                                   input="Say hello.", max_output_tokens=24, extra_body=T0,
                                   metadata={"purpose": "test"})
    assert resp.object == "response" and resp.id.startswith("resp_") and resp.model == "qwen"
    assert resp.status in ("completed", "incomplete")
    assert [item.type for item in resp.output] == ["message"]
    assert resp.output_text and resp.output[0].content[0].type == "output_text"
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    assert resp.metadata == {"purpose": "test"} and resp.store is True
    assert "hypnos_telemetry" in resp.model_extra
    got = client.responses.retrieve(resp.id)
    assert got.id == resp.id and got.output_text == resp.output_text
    assert memory(server)["stored_responses"]["count"] >= 1
    client.responses.delete(resp.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)


def test_a_cut_answer_is_incomplete_and_store_false_is_not_kept(client):
    resp = client.responses.create(model="qwen", input="Write a long story about the sea.",
                                   max_output_tokens=2, store=False, extra_body=T0)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 2
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    with pytest.raises(openai.NotFoundError) as refused:
        client.responses.create(model="qwen", input="more", previous_response_id=resp.id)
    assert refused.value.body["param"] == "previous_response_id"


def test_stream_follows_the_responses_event_sequence(client):
    events = list(client.responses.create(model="qwen", input="Count to five.",
                                          max_output_tokens=16, stream=True, extra_body=T0))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert kinds[2:5] == ["response.output_item.added", "response.content_part.added",
                          "response.output_text.delta"]
    order = [kinds.index(k) for k in ("response.output_text.done", "response.content_part.done",
                                      "response.output_item.done")]
    assert order == sorted(order)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.output_text == text and final.usage.output_tokens > 0
    assert final.id == events[0].response.id


def test_the_sdk_stream_helper_accumulates_the_same_response(client):
    with client.responses.stream(model="qwen", input="Say OK.", max_output_tokens=400,
                                 extra_body=T0) as stream:
        for _event in stream:
            pass
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_forced_function_call_round_trip_through_previous_response_id(client):
    """tool_choice required is the forced-call grammar: the call parses whatever the path;
    the next turn answers its call_id from the stored conversation, whose prompt (the same
    tools, the same head) the slot bound to the conversation still holds."""
    first = client.responses.create(model="qwen", input="What's the weather in Paris?",
                                    tools=[WEATHER], tool_choice="required",
                                    max_output_tokens=64, extra_body=T0)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert isinstance(json.loads(calls[0].arguments)["city"], str)
    assert calls[0].call_id.startswith("call_")
    reply = client.responses.create(
        model="qwen", previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "Sunny, 23 degrees C"}], max_output_tokens=48, extra_body=T0)
    assert reply.previous_response_id == first.id
    assert reply.status in ("completed", "incomplete") and reply.output
    assert reply.usage.input_tokens > first.usage.input_tokens
    assert reply.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 2


def test_named_function_streams_its_arguments_and_items_round_trip_statelessly(client):
    choice = {"type": "function", "name": "get_weather"}
    events = list(client.responses.create(model="qwen", input="Weather for Oslo",
                                          tools=[WEATHER], tool_choice=choice, stream=True,
                                          max_output_tokens=64, store=False, extra_body=T0))
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert "city" in json.loads(done.arguments)
    call = next(i for i in events[-1].response.output if i.type == "function_call")
    assert call.arguments == done.arguments
    reply = client.responses.create(
        model="qwen", store=False, tools=[WEATHER], max_output_tokens=32, extra_body=T0,
        input=[{"role": "user", "content": "Weather for Oslo"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "Rain, 8 degrees C"}])
    assert reply.status in ("completed", "incomplete") and reply.output


def test_previous_response_id_across_a_swap_reuses_the_prefix(server, client):
    """Turn 1 is stored; the model is then swapped out of tier 1 (its KV parked); turn 2
    continues the stored conversation and prefills only what is new."""
    system = "You are a helpful assistant who answers in one short sentence. " * 12
    first = client.responses.create(model="qwen", instructions=system,
                                    input="Name a colour.", max_output_tokens=12,
                                    extra_body=T0)
    moved = post(server, "/v1/memory/tier", {"model": "qwen", "target_tier": "tier3_nvme_ssd"})
    assert moved.status_code == 200 and moved.json()["current_tier"] != "tier1_gpu_vram"
    park = memory(server)["kv_park"]
    assert any(m["model"] == "qwen" and m["tokens"] > 0 for m in park["models"])
    second = client.responses.create(model="qwen", instructions=system,
                                     previous_response_id=first.id,
                                     input="Name another one.", max_output_tokens=12,
                                     extra_body=T0)
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens // 2, (cached, first.usage)
    assert second.usage.input_tokens > first.usage.input_tokens + 4
    phases = second.model_extra["hypnos_telemetry"]["tier_switch_phases"]
    assert phases["kv_restored_tokens"] > 0


def test_input_items_lists_a_stored_responses_own_input_a_page_at_a_time(client):
    resp = client.responses.create(
        model="qwen", tools=[WEATHER], max_output_tokens=1, extra_body=T0,
        input=[{"role": "user", "content": "Weather for Oslo"},
               {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                "arguments": '{"city": "Oslo"}'},
               {"type": "function_call_output", "call_id": "call_1", "output": "Rain"}])
    page = client.responses.input_items.list(resp.id)         # newest first by default
    assert [i.type for i in page.data] == ["function_call_output", "function_call", "message"]
    assert len({i.id for i in page.data}) == 3 and not page.has_more
    assert (page.first_id, page.last_id) == (page.data[0].id, page.data[-1].id)
    first = client.responses.input_items.list(resp.id, order="asc", limit=2)
    assert [i.type for i in first.data] == ["message", "function_call"] and first.has_more
    assert first.data[0].content[0].type == "input_text"
    assert first.data[0].content[0].text == "Weather for Oslo"
    rest = client.responses.input_items.list(resp.id, order="asc", after=first.last_id)
    assert [i.type for i in rest.data] == ["function_call_output"] and not rest.has_more
    # The SDK's auto-pagination follows last_id while has_more holds.
    walked = list(client.responses.input_items.list(resp.id, order="asc", limit=1))
    assert [i.id for i in walked] == [i.id for i in reversed(page.data)]
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.input_items.list(resp.id, limit=101)
    assert refused.value.body["param"] == "limit"


def test_input_tokens_counts_what_create_reads(client):
    counted = client.responses.input_tokens.count(model="qwen", input="How many tokens?",
                                                  instructions="Be brief.")
    assert counted.object == "response.input_tokens"
    resp = client.responses.create(model="qwen", input="How many tokens?",
                                   instructions="Be brief.", max_output_tokens=1, store=True)
    assert counted.input_tokens == resp.usage.input_tokens
    more = client.responses.input_tokens.count(model="qwen", previous_response_id=resp.id,
                                               input="And now?")
    assert more.input_tokens > counted.input_tokens


def test_text_format_json_schema_is_the_structured_output_grammar(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    resp = client.responses.create(
        model="qwen", input="Give the city and population of Tokyo as JSON.",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                         "strict": True}}, max_output_tokens=48, extra_body=T0)
    answer = json.loads(resp.output_text)
    assert set(answer) == {"city", "population"} and isinstance(answer["population"], int)
    assert resp.text.format.type == "json_schema"


def test_reasoning_comes_back_as_a_reasoning_item(client):
    resp = client.responses.create(model="thinker", input="Why is the sky blue?",
                                   reasoning={"effort": "low"}, max_output_tokens=40,
                                   extra_body=T0)
    assert resp.output[0].type == "reasoning" and resp.output[0].content[0].text
    thought = resp.usage.output_tokens_details.reasoning_tokens
    assert 0 < thought <= resp.usage.output_tokens
    events = list(client.responses.create(model="thinker", input="Why is the sky blue?",
                                          reasoning={"effort": "low"}, max_output_tokens=24,
                                          stream=True, store=False, extra_body=T0))
    assert "response.reasoning_text.delta" in [e.type for e in events]


def test_hosted_tool_types_are_ignored_and_named(client):
    resp = client.responses.create(
        model="qwen", input="Say hi.", max_output_tokens=8, store=False, extra_body=T0,
        tools=[WEATHER, {"type": "web_search"},
               {"type": "custom", "name": "apply_patch", "description": "patch"}],
        tool_choice="auto")
    assert resp.model_extra["hypnos_ignored_tools"] == ["web_search", "custom"]
    assert [t.type for t in resp.tools] == ["function", "web_search", "custom"]


@pytest.mark.parametrize("body, status, fragment", [
    ({"model": "qwen", "input": "hi", "previous_response_id": "resp_nope"}, 404,
     "resp_nope"),
    ({"model": "qwen", "input": "hi", "tools": [{"type": "web_search"}],
      "tool_choice": {"type": "web_search"}}, 400, "web_search"),
    ({"model": "qwen", "input": [{"type": "function_call_output", "call_id": "c9",
                                  "output": "x"}]}, 400, "call_id"),
    ({"model": "qwen", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
        {"type": "input_text", "text": "What is this?"}]}]}, 400, "vision"),
    ({"model": "nope", "input": "hi"}, 404, "nope"),
    ({"model": "qwen"}, 400, "input"),
])
def test_bad_requests_get_openai_envelope(server, body, status, fragment):
    resp = post(server, "/v1/responses", body)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert fragment in err["message"] and err["type"]


def test_an_interrupted_stream_frees_its_lease(server):
    body = {"model": "qwen", "input": "Write a long story about the sea.",
            "max_output_tokens": 400, "stream": True, "store": False, "temperature": 0}
    with httpx.stream("POST", server.base + "/v1/responses", json=body, timeout=120,
                      headers={"authorization": f"Bearer {KEY}"}) as resp:
        for line in resp.iter_lines():
            if "response.output_text.delta" in line:
                break
    for _ in range(200):
        qwen = next(m for m in memory(server)["models"] if m["id"] == "qwen")
        if qwen["active_leases"] == 0:
            break
        time.sleep(0.1)
    assert qwen["active_leases"] == 0
