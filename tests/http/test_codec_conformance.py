"""Every chat dialect renders one scripted answer the same way: reasoning, text in two pieces,
a tool call, then a length stop, or a refusal raised by the engine once the stream is under
way. The answer goes through the real app (route, the one turn, the dialect's codec) with a
scripted engine instead of a model; the wire frames are fed to each dialect's official SDK
(openai's chat stream state and Responses stream state, anthropic's stream accumulator, the
ollama client's response types, openai's legacy Completion), and what the SDK rebuilds is
compared with the script. Each answer also carries the usage and hypnos_telemetry, and
records the turn once (the prefix-cache counter moves by one per request).

The script is fixed, so exact texts are asserted: what is checked is the rendering, never a
model's output. Drift between dialects is a failing test here.
"""
import json
import tomllib

import pytest
from sanic import Sanic

from conftest import EngineEffects
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.errors import EngineError
from hypnos.engines.records import ChatDelta, ChatResult, ToolCall
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

PROMPT_TOKENS, COMPLETION_TOKENS, WINDOW = 11, 7, 4096
REASONING, PIECES = "Thinking it over.", ["The answer", " is 42."]
TEXT = "".join(PIECES)
CALL = ToolCall("get_weather", '{"city": "Paris"}')
SCRIPT = [ChatDelta(reasoning=REASONING), *(ChatDelta(content=p) for p in PIECES),
          ChatDelta(tool_call=CALL)]
REFUSE = "refuse"                 # a prompt holding it makes the engine fail mid-stream
FAILURE = "the scripted engine stopped"
MODEL = "chat"


class ScriptedEngine:
    """Says `SCRIPT`, then stops for length; with `REFUSE` in the prompt it fails after the
    script instead (an engine error: the turn's refusal after the stream started)."""
    n_ctx_per_slot = WINDOW
    format = None

    def prompt_tokens(self, req) -> int:
        return PROMPT_TOKENS

    def chat(self, req, on_text, cancel) -> ChatResult:
        for d in SCRIPT:
            if on_text is not None:
                on_text(d)
        if REFUSE in json.dumps(req.messages) + (req.prompt or ""):
            raise EngineError(FAILURE)
        return ChatResult(text=TEXT, reasoning=REASONING, finish_reason="length",
                          prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS,
                          tool_calls=[CALL], kv_used=PROMPT_TOKENS + COMPLETION_TOKENS,
                          kv_cap=WINDOW)


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
id = "{MODEL}"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "chat.gguf"
context_len = {WINDOW}
"""))
    return create_app(cfg, catalog=load_catalog(), stage=False,
                      effects=EngineEffects(ScriptedEngine()))


def records(app) -> float:
    """How many chat turns the app recorded (each records the prefix cache once)."""
    return app.ctx.metrics.registry.get_sample_value("hypnos_prefix_cache_misses_total") or 0


async def post(app, path: str, body: dict, answered: bool = True):
    """The answer of one request, and proof that it recorded its turn once (none when the
    engine failed: ``answered`` false)."""
    before = records(app)
    _req, resp = await app.asgi_client.post(path, json=body)
    assert resp.status == 200, resp.text
    assert records(app) == before + answered
    return resp


def sse(resp) -> list[tuple[str | None, object]]:
    """(event name, data) per SSE event; comments and blank lines are all else allowed."""
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache"
    out, name = [], None
    for line in resp.text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data = line[len("data: "):]
            out.append((name, data if data == "[DONE]" else json.loads(data)))
            name = None
        else:
            assert line == "" or line.startswith(":"), line
    return out


def ndjson(resp) -> list[dict]:
    assert resp.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in resp.text.splitlines() if line]


def check_telemetry(tele: dict) -> None:
    assert tele["engine"]["concurrent_slots"] == 1 and "placement" in tele
    assert tele["inference_latency_ms"] >= 0


ASK = [{"role": "user", "content": "What is the answer?"}]
REFUSED = [{"role": "user", "content": f"Please {REFUSE}."}]
OPENAI_TOOL = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}}}}


# ------------------------------------------------------------------ OpenAI chat completions

def openai_usage_ok(usage) -> None:
    assert (usage.prompt_tokens, usage.completion_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)


async def test_openai_chat_whole_and_stream_rebuild_the_script(app):
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    body = {"model": MODEL, "messages": ASK, "tools": [OPENAI_TOOL]}

    whole = ChatCompletion.model_validate((await post(app, "/v1/chat/completions", body)).json)
    streamed = await post(app, "/v1/chat/completions", {**body, "stream": True})
    events = sse(streamed)
    assert events[-1] == (None, "[DONE]")
    state = ChatCompletionStreamState()
    for _name, chunk in events[:-1]:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    rebuilt = state.current_completion_snapshot     # (get_final_completion refuses "length")

    last_chunk = events[-2][1]        # the accumulator keeps no top-level extra field
    for answer, tele in ((whole, whole.model_extra["hypnos_telemetry"]),
                         (rebuilt, last_chunk["hypnos_telemetry"])):
        (choice,) = answer.choices
        assert choice.finish_reason == "length"
        assert choice.message.content == TEXT
        assert choice.message.model_extra["reasoning_content"] == REASONING
        (call,) = choice.message.tool_calls
        assert (call.function.name, call.function.arguments) == (CALL.name, CALL.arguments)
        openai_usage_ok(answer.usage)
        check_telemetry(tele)


async def test_openai_chat_refusal_mid_stream_is_an_error_chunk_then_done(app):
    from openai.types.chat import ChatCompletionChunk
    resp = await post(app, "/v1/chat/completions",
                      {"model": MODEL, "messages": REFUSED, "stream": True}, answered=False)
    events = sse(resp)
    assert events[-1] == (None, "[DONE]")
    *said, (_name, failed) = events[:-1]
    # The SDK raises on a chunk with "error" (its stream stops there): what came before is
    # the script's deltas, then the error.
    pieces = [ChatCompletionChunk.model_validate(c).choices[0].delta for _n, c in said]
    assert "".join(d.content or "" for d in pieces) == TEXT
    assert failed["choices"][0]["finish_reason"] == "error"
    assert failed["error"]["type"] == "server_error" and FAILURE in failed["error"]["message"]


# ------------------------------------------------------------------ OpenAI legacy completions

async def test_legacy_completion_whole_and_stream_rebuild_the_text(app):
    from openai.types import Completion
    body = {"model": MODEL, "prompt": "The answer is", "max_tokens": 8}
    whole = Completion.model_validate((await post(app, "/v1/completions", body)).json)
    events = sse(await post(app, "/v1/completions", {**body, "stream": True}))
    assert events[-1] == (None, "[DONE]")
    chunks = [Completion.construct(**c) for _n, c in events[:-1]]  # as the SDK reads them
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text == TEXT
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "length"
    for answer in (whole, chunks[-1]):
        openai_usage_ok(answer.usage)
        check_telemetry(answer.model_extra["hypnos_telemetry"])

    failed = sse(await post(app, "/v1/completions", {**body, "prompt": REFUSE, "stream": True},
                           answered=False))
    assert failed[-1] == (None, "[DONE]")
    assert failed[-2][1]["choices"][0]["finish_reason"] == "error"
    assert FAILURE in failed[-2][1]["error"]["message"]


# ------------------------------------------------------------------ OpenAI Responses

async def test_responses_whole_and_stream_rebuild_the_script(app):
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai import omit
    from openai._models import construct_type
    from openai.types.responses import Response, ResponseStreamEvent
    tool = {"type": "function", "name": "get_weather",
            "parameters": OPENAI_TOOL["function"]["parameters"]}
    body = {"model": MODEL, "input": "What is the answer?", "tools": [tool], "store": False}
    whole = Response.construct(**(await post(app, "/v1/responses", body)).json)
    events = sse(await post(app, "/v1/responses", {**body, "stream": True}))
    state = ResponseStreamState(input_tools=[tool], text_format=omit)
    seen = []
    for name, data in events:
        assert isinstance(data, dict) and data["type"] == name
        seen += state.handle_event(construct_type(type_=ResponseStreamEvent, value=data))
    assert events[-1][0] == "response.incomplete"     # cut by length: max_output_tokens
    final = Response.construct(**events[-1][1]["response"])

    for answer in (whole, final):
        assert answer.status == "incomplete"
        assert answer.incomplete_details.reason == "max_output_tokens"
        assert answer.output_text == TEXT
        kinds = [item.type for item in answer.output]
        assert kinds == ["reasoning", "message", "function_call"]
        assert answer.output[0].content[0].text == REASONING
        call = answer.output[2]
        assert (call.name, call.arguments) == (CALL.name, CALL.arguments)
        assert (answer.usage.input_tokens, answer.usage.output_tokens) == \
            (PROMPT_TOKENS, COMPLETION_TOKENS)
        check_telemetry(answer.model_extra["hypnos_telemetry"])
    # The SDK's own snapshot, built from the deltas, holds the same text.
    text_deltas = [e for e in seen if e.type == "response.output_text.delta"]
    assert len(text_deltas) == len(PIECES) and text_deltas[-1].snapshot == TEXT

    failed = sse(await post(app, "/v1/responses", {**body, "input": REFUSE, "stream": True},
                           answered=False))
    name, data = failed[-1]
    assert name == "response.failed" and data["response"]["status"] == "failed"
    assert FAILURE in data["response"]["error"]["message"]
    assert [i["type"] for i in data["response"]["output"]] == ["reasoning", "message",
                                                                "function_call"]


# ------------------------------------------------------------------ Anthropic Messages

async def test_anthropic_whole_and_stream_rebuild_the_script(app):
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import Message
    tool = {"name": "get_weather", "input_schema": OPENAI_TOOL["function"]["parameters"]}
    body = {"model": MODEL, "max_tokens": 64, "messages": ASK, "tools": [tool]}
    whole = Message.construct(**(await post(app, "/v1/messages", body)).json)
    events = sse(await post(app, "/v1/messages", {**body, "stream": True}))
    snapshot, bufs = None, {}
    for name, data in events:
        if name == "ping":
            continue
        assert isinstance(data, dict) and data["type"] == name
        snapshot = accumulate_event(event=data,       # built as the SDK's stream builds it
                                    current_snapshot=snapshot, json_bufs=bufs)
    assert events[-1][0] == "message_stop"
    delta = next(d for n, d in events if n == "message_delta")

    for answer, usage, tele in ((whole, whole.usage, whole.model_extra["hypnos_telemetry"]),
                                (snapshot, delta["usage"], delta["hypnos_telemetry"])):
        assert answer.stop_reason == "max_tokens"
        thinking, text, call = answer.content
        assert thinking.type == "thinking" and thinking.thinking == REASONING
        assert text.type == "text" and text.text == TEXT
        assert call.type == "tool_use" and call.name == CALL.name
        assert call.input == json.loads(CALL.arguments)
        usage = usage if isinstance(usage, dict) else usage.model_dump()
        assert (usage["input_tokens"], usage["output_tokens"]) == \
            (PROMPT_TOKENS, COMPLETION_TOKENS)
        check_telemetry(tele)

    failed = sse(await post(app, "/v1/messages", {**body, "messages": REFUSED,
                                                  "stream": True}, answered=False))
    name, data = failed[-1]
    assert name == "error" and data["error"]["type"] == "api_error"
    assert FAILURE in data["error"]["message"]


# ------------------------------------------------------------------ Ollama

async def test_ollama_chat_whole_and_stream_rebuild_the_script(app):
    from ollama import ChatResponse
    body = {"model": MODEL, "messages": ASK, "tools": [OPENAI_TOOL]}
    whole_resp = await post(app, "/api/chat", {**body, "stream": False})
    lines = ndjson(await post(app, "/api/chat", body))
    whole = ChatResponse.model_validate(whole_resp.json)
    parts = [ChatResponse.model_validate(line) for line in lines]
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    rebuilt = {"content": "".join(p.message.content or "" for p in parts),
               "thinking": "".join(p.message.thinking or "" for p in parts),
               "calls": [c for p in parts for c in p.message.tool_calls or ()]}
    for answer in ({"content": whole.message.content, "thinking": whole.message.thinking,
                    "calls": whole.message.tool_calls}, rebuilt):
        assert answer["content"] == TEXT and answer["thinking"] == REASONING
        (call,) = answer["calls"]
        assert call.function.name == CALL.name
        assert dict(call.function.arguments) == json.loads(CALL.arguments)
    for last, raw in ((whole, whole_resp.json), (parts[-1], lines[-1])):
        assert last.done_reason == "length"
        assert (last.prompt_eval_count, last.eval_count) == (PROMPT_TOKENS, COMPLETION_TOKENS)
        check_telemetry(raw["hypnos_telemetry"])      # the drift fixed: Ollama has it too

    failed = ndjson(await post(app, "/api/chat", {**body, "messages": REFUSED},
                               answered=False))
    assert FAILURE in failed[-1]["error"] and "done" not in failed[-1]


async def test_ollama_generate_whole_and_stream_rebuild_the_text(app):
    from ollama import GenerateResponse
    body = {"model": MODEL, "prompt": "What is the answer?"}
    whole_resp = await post(app, "/api/generate", {**body, "stream": False})
    lines = ndjson(await post(app, "/api/generate", body))
    whole = GenerateResponse.model_validate(whole_resp.json)
    parts = [GenerateResponse.model_validate(line) for line in lines]
    assert "".join(p.response for p in parts) == whole.response == TEXT
    assert "".join(p.thinking or "" for p in parts) == whole.thinking == REASONING
    for last, raw in ((whole, whole_resp.json), (parts[-1], lines[-1])):
        assert last.done and last.done_reason == "length"
        assert (last.prompt_eval_count, last.eval_count) == (PROMPT_TOKENS, COMPLETION_TOKENS)
        check_telemetry(raw["hypnos_telemetry"])


async def test_ollama_answers_carry_the_wait_headers_the_other_dialects_send(app, monkeypatch):
    """The drift fixed: Ollama's routes took the lease without passing its wait estimate on.
    A lease that has one (the scheduler's estimate when the request came) sends it on every
    dialect, whole or streamed."""
    from hypnos.service.scheduling.pool import ModelState
    monkeypatch.setattr(ModelState, "estimated_wait_ms", lambda self: 250.0)
    for path, body in (("/api/chat", {"messages": ASK}), ("/api/generate", {"prompt": "Hi"}),
                       ("/v1/chat/completions", {"messages": ASK})):
        for stream in (False, True):
            resp = await post(app, path, {"model": MODEL, **body, "stream": stream})
            assert resp.headers["x-hypnos-estimated-wait-ms"] == "250", (path, stream)
