"""How /v1/chat/completions renders an engine's answer, through Sanic's ASGI client and the
real app, with a scripted engine instead of a model: the JSON body (reasoning, content, tool
calls, finish reason), the SSE chunk sequence, usage (the prompt once, completions summed
over the choices, the KV use against the advertised window) and n choices in order.

The engine's text is fixed, so exact texts are asserted here: what is checked is the
rendering, never a model's output. The model file is a tiny GGUF written for the test (the
scheduler reads its header); the load is the fake effects' (tests/fakes.py), so no model.
"""
import json
import re
import tomllib

import pytest
from sanic import Sanic

from conftest import EngineEffects
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.records import ChatDelta, ChatResult, ToolCall
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

PROMPT_TOKENS = 11
WINDOW = 4096
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
ARGS = '{"city": "Paris"}'
CALL_ID = re.compile(r"call_[0-9a-f]{12}_0")


def script(index: int, tools: bool) -> list[ChatDelta]:
    """What choice ``index`` says: thinking, two pieces of content naming the choice, and a
    call when tools are offered."""
    deltas = [ChatDelta(reasoning="Checking the sky."),
              ChatDelta(content=f"Choice {index}: "), ChatDelta(content="sunny.")]
    return deltas + ([ChatDelta(tool_call=ToolCall("get_weather", ARGS))] if tools else [])


class ScriptedChatEngine:
    """A ChatEngine whose answer is `script` for the request's choice: one token per delta
    (choice i's completion is 3 + i tokens, so a sum shows which choices were counted)."""
    n_ctx_per_slot = WINDOW
    format = None                 # no template read: tools are taken as offered

    def prompt_tokens(self, req) -> int:
        return PROMPT_TOKENS

    def chat(self, req, on_text, cancel) -> ChatResult:
        index = req.group.index if req.group is not None else 0
        tools = bool(req.tools) and req.tool_choice != "none"
        deltas = script(index, tools)
        for d in deltas:
            if on_text is not None:
                on_text(d)
        completion = 3 + index
        return ChatResult(
            text="".join(d.content for d in deltas), reasoning="Checking the sky.",
            finish_reason="tool_calls" if tools else "stop", prompt_tokens=PROMPT_TOKENS,
            completion_tokens=completion, tool_calls=[ToolCall("get_weather", ARGS)] * tools,
            kv_used=PROMPT_TOKENS + completion, kv_cap=WINDOW)


@pytest.fixture
def app(tmp_path):
    import gguf
    import numpy as np
    writer = gguf.GGUFWriter(str(tmp_path / "chat.gguf"), "llama")
    writer.add_context_length(WINDOW)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    cfg = parse_config(tomllib.loads(f"""models_dir = "{tmp_path}"
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "chat.gguf"
context_len = {WINDOW}
"""))
    return create_app(cfg, catalog=load_catalog(), stage=False,
                      effects=EngineEffects(ScriptedChatEngine()))


async def complete(app, **body):
    _req, resp = await app.asgi_client.post("/v1/chat/completions", json={
        "model": "chat", "messages": ASK, **body})
    assert resp.status == 200, resp.text
    return resp


def events(resp) -> list:
    """The SSE data events in order, JSON decoded ("[DONE]" kept as text); nothing else but
    blank lines and comments may be on the wire."""
    assert resp.headers["content-type"].startswith("text/event-stream")
    out = []
    for line in resp.text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "" or line.startswith(":"), line
    return out


def expected_usage(completions: list[int]) -> dict:
    total = sum(completions)
    return {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": total,
            "total_tokens": PROMPT_TOKENS + total,
            "prompt_tokens_details": {"cached_tokens": 0},
            "kv_used": PROMPT_TOKENS + completions[0], "kv_cap": WINDOW}


async def test_json_body_holds_reasoning_content_and_the_call(app):
    body = (await complete(app, tools=[WEATHER])).json
    assert body["object"] == "chat.completion" and body["model"] == "chat"
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{24}", body["id"])
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    (call,) = message.pop("tool_calls")
    assert CALL_ID.fullmatch(call.pop("id"))
    assert call == {"type": "function", "function": {"name": "get_weather", "arguments": ARGS}}
    assert message == {"role": "assistant", "content": "Choice 0: sunny.",
                       "reasoning_content": "Checking the sky."}
    assert body["usage"] == expected_usage([3])
    assert "choices_batched" not in body and "choice_seeds" not in body
    assert body["hypnos_telemetry"]["engine"]["concurrent_slots"] == 1


async def test_without_tools_there_is_no_call_and_the_answer_stops(app):
    body = (await complete(app)).json
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == "Choice 0: sunny."


async def test_n_choices_render_in_order_with_their_seeds_and_summed_usage(app):
    body = (await complete(app, n=3, seed=40)).json
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in body["choices"]] == \
        [f"Choice {i}: sunny." for i in range(3)]
    assert body["choices_batched"] is True and body["choice_seeds"] == [40, 41, 42]
    assert body["usage"] == expected_usage([3, 4, 5])


async def test_the_stream_is_role_deltas_finish_usage_done(app):
    resp = await complete(app, tools=[WEATHER], stream=True,
                          stream_options={"include_usage": True})
    evs = events(resp)
    assert evs[-1] == "[DONE]"
    chunks = evs[:-1]
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "chat"
               for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2]]
    call = deltas[4]["tool_calls"][0]
    assert CALL_ID.fullmatch(call.pop("id"))
    assert deltas == [
        {"role": "assistant", "content": ""}, {"reasoning_content": "Checking the sky."},
        {"content": "Choice 0: "}, {"content": "sunny."},
        {"tool_calls": [{"index": 0, "type": "function",
                         "function": {"name": "get_weather", "arguments": ARGS}}]}]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    finish, tail = chunks[-2], chunks[-1]
    assert finish["choices"] == [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]
    assert finish["usage"] == expected_usage([3]) and "hypnos_telemetry" in finish
    # include_usage: one more chunk, no choices, the same usage.
    assert tail["choices"] == [] and tail["usage"] == finish["usage"]
    assert all("usage" not in c for c in chunks[:-2])


async def test_a_stream_without_include_usage_ends_on_the_finish_chunk(app):
    chunks = events(await complete(app, stream=True))[:-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == expected_usage([3])
    assert all(c["choices"] for c in chunks)


async def test_a_stream_of_n_choices_keeps_each_choice_in_order(app):
    evs = events(await complete(app, n=2, seed=7, stream=True))
    assert evs[-1] == "[DONE]"
    chunks = evs[:-1]
    assert all(c["choice_seeds"] == [7, 8] and c["choices_batched"] for c in chunks)
    # Each chunk carries one choice; the choices' deltas may interleave, each in its order.
    per_choice: dict[int, list] = {0: [], 1: []}
    for c in chunks:
        (choice,) = c["choices"]
        per_choice[choice["index"]].append((choice["delta"], choice["finish_reason"]))
    for i, seen in per_choice.items():
        assert seen == [({"role": "assistant", "content": ""}, None),
                        ({"reasoning_content": "Checking the sky."}, None),
                        ({"content": f"Choice {i}: "}, None), ({"content": "sunny."}, None),
                        ({}, "stop")]
    # The finish chunks come last, in index order; usage (both choices) on the last one only.
    assert [c["choices"][0]["index"] for c in chunks[-2:]] == [0, 1]
    assert [c.get("usage") for c in chunks] == [None] * (len(chunks) - 1) + \
        [expected_usage([3, 4])]
