"""Chat, complete: tools, thinking, stop, n, logprobs, response_format, /v1/completions,
the context window, media parts and each 400, through a real `hypnos serve` process and the
official `openai` client, on the real SmolLM2-135M.

Two models here are generated from SmolLM2 by the tests, and say so:
- "thinker": SmolLM2's weights with a Qwen3-style chat template written into the GGUF
  (`gguf_new_metadata`), so the thinking budget runs on a template that has a thinking block;
- "smol-vision": SmolLM2 plus a tiny random-weight vision projector (tests/tiny_mmproj.py)
  in the format llama.cpp reads. Its answers are noise; it proves the image plumbing only.
"""
import base64
import io
import json
import httpx
import openai
import pytest

from model_dirs import serve

from hypnos.engines.llama.speculative.accept import NEAR_TIE

pytestmark = [pytest.mark.real, pytest.mark.slow]

QUESTION = [{"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What is the capital of France?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string"}}, "required": ["zone"]}}}
LOOP_BOUND = 60


CONFIG = f"""
[limits]
repetition_loop_tokens = {LOOP_BOUND}

[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
slots = 2
context_len = 4096
initial_tier = "tier1_gpu_vram"
# Answers of one request are compared token for token across asks; drafting from an earlier
# answer would make a step another batch shape.
speculative = "off"

[[models]]
id = "thinker"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "thinker.gguf"
context_len = 4096

[[models]]
id = "notools"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
tool_format = "none"
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
    srv = serve(tmp_path_factory.mktemp("chat-complete"), CONFIG, smol=True, thinker=True,
                vision=True)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0,
                         timeout=600)


def bad_request(server, body: dict, status: int = 400) -> dict:
    r = httpx.post(server.base + "/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == status, r.text
    return r.json()["error"]


# ------------------------------------------------------------------------ tools

def test_named_tool_call_round_trip(client):
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    first = client.chat.completions.create(
        model="smol", messages=messages, tools=[WEATHER, TIME], temperature=0, max_tokens=64,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    args = json.loads(call.function.arguments)           # the grammar made it parse
    assert isinstance(args["city"], str) and args["city"]  # and carry the required key
    # The call and its result go back; the model answers in text.
    messages += [{"role": "assistant", "content": None, "tool_calls": [{
                     "id": call.id, "type": "function",
                     "function": {"name": call.function.name,
                                  "arguments": call.function.arguments}}]},
                 {"role": "tool", "tool_call_id": call.id,
                  "content": json.dumps({"temperature": 18, "condition": "sunny"})}]
    second = client.chat.completions.create(
        model="smol", messages=messages, tools=[WEATHER, TIME], temperature=0, max_tokens=40,
        tool_choice="none")
    assert second.choices[0].finish_reason in ("stop", "length")
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls
    # The call and the result were rendered into the prompt of the second turn.
    alone = client.chat.completions.create(
        model="smol", messages=messages[:1], tools=[WEATHER, TIME], temperature=0,
        max_tokens=1, tool_choice="none")
    assert second.usage.prompt_tokens > alone.usage.prompt_tokens + 20


def test_required_tool_choice_calls_one_of_the_tools(client):
    out = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=[WEATHER, TIME], tool_choice="required", temperature=0, max_tokens=64)
    call = out.choices[0].message.tool_calls[0]
    assert call.function.name in ("get_weather", "get_time")
    assert json.loads(call.function.arguments)


def test_stream_with_a_tool_call_sends_it_whole_in_one_chunk(client):
    stream = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Weather in Rome?"}],
        tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0, max_tokens=64, stream=True)
    call_chunks, finish = [], None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.tool_calls:
            call_chunks.append(delta.tool_calls)
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and len(call_chunks) == 1
    (call,) = call_chunks[0]
    assert call.index == 0 and call.id and call.type == "function"
    assert call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)


def test_legacy_functions_are_converted_to_tools(server):
    r = httpx.post(server.base + "/v1/chat/completions", timeout=600, json={
        "model": "smol", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "functions": [WEATHER["function"]], "function_call": {"name": "get_weather"},
        "temperature": 0, "max_tokens": 64})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


# --------------------------------------------------------------------- thinking

def test_reasoning_budget_closes_the_thinking_block(client):
    """The generated Qwen3-style template opens a <think> block; after 16 thinking tokens
    the server closes it and the model answers. Delimiters never reach the client."""
    stream = client.chat.completions.create(
        model="thinker", temperature=0, max_tokens=80, stream=True,
        messages=[{"role": "user", "content": "Write a long story about a dragon who learns "
                                              "to bake bread."}],
        extra_body={"reasoning_budget": 16})
    order, reasoning, content = [], [], []
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            order.append("r")
            reasoning.append(extra["reasoning_content"])
        if delta.content:
            order.append("c")
            content.append(delta.content)
    text = "".join(reasoning) + "".join(content)
    assert reasoning and content
    assert "".join(order) == "r" * order.count("r") + "c" * order.count("c")
    assert "<think>" not in text and "</think>" not in text
    # 16 thinking tokens: re-tokenised text can differ by a token or two at the seams.
    assert 8 <= len("".join(reasoning).split()) <= 20


def test_reasoning_effort_in_the_plain_response_and_none_turns_it_off(server):
    post = lambda body: httpx.post(server.base + "/v1/chat/completions", timeout=600,  # noqa
                                   json={"model": "thinker", "temperature": 0,
                                         "max_tokens": 40, **body}).json()
    ask = [{"role": "user", "content": "Write a long story about a dragon."}]
    on = post({"messages": ask, "reasoning_effort": "low"})["choices"][0]["message"]
    assert on["reasoning_content"] and "<think>" not in on["reasoning_content"]
    off = post({"messages": ask, "reasoning_effort": "none"})["choices"][0]["message"]
    assert "reasoning_content" not in off and off["content"]
    assert "</think>" not in off["content"]
    # reasoning_content in the history is dropped from the prompt: same prompt size.
    history = ask + [{"role": "assistant", "content": "Once.", "reasoning_content": "x " * 50},
                     {"role": "user", "content": "More."}]
    plain = ask + [{"role": "assistant", "content": "Once."}, {"role": "user", "content": "More."}]
    a = post({"messages": history, "max_tokens": 1})["usage"]["prompt_tokens"]
    b = post({"messages": plain, "max_tokens": 1})["usage"]["prompt_tokens"]
    assert a == b


# ------------------------------------------------------------ request features

def test_stop_string_across_delta_boundaries_never_leaks(client):
    kw = dict(model="smol", messages=QUESTION, temperature=0, max_tokens=24)
    client.chat.completions.create(**kw)   # warm-up: the runs below share one cache state
    full = client.chat.completions.create(**kw).choices[0].message.content
    assert len(full) > 24, full
    # A stop string taken from this build's own answer, several tokens long.
    stop = full[len(full) // 2:len(full) // 2 + 10]
    stream = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                            max_tokens=24, stop=[stop, "NEVER"], stream=True)
    deltas = [c.choices[0].delta.content or "" for c in stream if c.choices]
    joined = "".join(deltas)
    assert joined == full[:full.index(stop)]        # nothing of the stop string leaked
    again = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                           max_tokens=24, stop=stop)
    assert again.choices[0].message.content == joined
    assert again.choices[0].finish_reason == "stop"


def test_n_choices_are_batched_with_seed_plus_index(client):
    """n=3: three choices decoded together, seeds 7, 8, 9 reported, the prompt counted once.
    Their texts are not compared with single requests: llama.cpp may round a batch of three
    differently from a batch of one on some CPUs (the README says so); that the same request
    gives the same choices again is tested on the engine (test_engine_llama)."""
    kw = dict(model="smol", messages=[{"role": "user", "content": "Tell me a fact."}],
              temperature=1.0, max_tokens=12)
    three = client.chat.completions.create(n=3, seed=7, **kw)
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert three.model_extra["choice_seeds"] == [7, 8, 9]
    assert three.model_extra["choices_batched"] is True
    single = client.chat.completions.create(seed=7, **kw)
    assert "choice_seeds" not in single.model_extra
    assert three.usage.prompt_tokens == single.usage.prompt_tokens   # counted once
    assert 3 <= three.usage.completion_tokens <= 36                   # summed over choices
    assert three.model_extra["hypnos_telemetry"]["engine"]["concurrent_slots"] >= 2


def test_logprobs_on_the_choice_and_on_stream_chunks(client):
    out = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                         max_tokens=8, logprobs=True, top_logprobs=3)
    entries = out.choices[0].logprobs.content
    assert len(entries) == out.usage.completion_tokens
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        # greedy: the chosen token is the likeliest one, or a drafted one (the pool holds
        # this question's earlier answers) within a near tie of it
        assert e.top_logprobs[0].logprob >= e.logprob >= \
            e.top_logprobs[0].logprob - NEAR_TIE - 1e-5
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
    assert "".join(e.token for e in entries).strip() == out.choices[0].message.content.strip()
    stream = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                            max_tokens=8, logprobs=True, stream=True)
    streamed = [e for c in stream if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in entries]


def test_json_schema_output_parses(server, client):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    raw = client.chat.completions.with_raw_response.create(
        model="smol", messages=[{"role": "user", "content": "Give me a person as JSON."}],
        temperature=0, max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    body = json.loads(raw.text)
    value = json.loads(body["choices"][0]["message"]["content"])
    assert isinstance(value["name"], str) and isinstance(value["age"], int)
    assert body["response_format_status"] == "applied"
    obj = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Describe Paris."}],
        temperature=0, max_tokens=60, response_format={"type": "json_object"})
    assert isinstance(json.loads(obj.choices[0].message.content), dict)
    with_tools = httpx.post(server.base + "/v1/chat/completions", timeout=600, json={
        "model": "smol", "messages": QUESTION, "max_tokens": 4, "tools": [WEATHER],
        "response_format": {"type": "json_object"}}).json()
    assert with_tools["response_format_status"] == "ignored_tools_present"


def test_logit_bias_bans_a_token(client):
    first = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                           max_tokens=6, logprobs=True)
    token = first.choices[0].logprobs.content[0]
    banned = _token_id(client, token.token)
    second = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                            max_tokens=6, logprobs=True,
                                            logit_bias={str(banned): -100})
    assert second.choices[0].logprobs.content[0].token != token.token


def _token_id(client, text: str) -> int:
    """The id of a one-token text, through a logprobs probe of /v1/completions with echo
    disabled: the engine's own tokenizer is not an HTTP route, so ask llama.cpp here."""
    from llama_cpp import llama_cpp as ll
    from conftest import SMOLLM2
    ll.llama_backend_init()
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(SMOLLM2).encode(), params)
    vocab = ll.llama_model_get_vocab(model)
    raw = text.encode()
    buf = (ll.llama_token * 8)()
    n = ll.llama_tokenize(vocab, raw, len(raw), buf, 8, False, False)
    ll.llama_model_free(model)
    assert n == 1, f"{text!r} is {n} tokens"
    return buf[0]


def test_repetition_loop_stops_the_answer(client):
    out = client.chat.completions.create(
        model="smol", temperature=0, max_tokens=400,
        messages=[{"role": "user", "content": "List the numbers 1 1 1 1 1 1 1 1 1 1 1 1"}])
    choice = out.choices[0]
    assert choice.finish_reason == "repetition_loop", choice.message.content
    # stopped once LOOP_BOUND tokens were one span repeated, checked every 4 tokens
    assert LOOP_BOUND <= out.usage.completion_tokens < LOOP_BOUND + 8


def test_stream_options_include_usage_adds_a_usage_chunk(client):
    stream = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                            max_tokens=4, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1


# -------------------------------------------------- completions and the window

def test_legacy_completions_plain_and_streamed(client):
    out = client.completions.create(model="smol", prompt="The capital of France is",
                                    max_tokens=6, temperature=0)
    text = out.choices[0].text
    assert text.strip() and out.object == "text_completion"
    assert out.usage.completion_tokens == 6 and out.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="smol", prompt="The capital of France is", max_tokens=6, temperature=0,
        stream=True) if c.choices)
    assert streamed == text
    echoed = client.completions.create(model="smol", prompt="Hi", max_tokens=2,
                                       temperature=0, echo=True, logprobs=2)
    assert echoed.choices[0].text.startswith("Hi")
    assert len(echoed.choices[0].logprobs.tokens) == 2


def test_context_window_usage_and_422_for_an_over_long_prompt(server, client):
    models = {m["id"]: m for m in server.get("/v1/models")["data"]}
    window = models["smol"]["context_window"]
    assert window == 8192                             # SmolLM2's trained context
    out = client.chat.completions.create(model="smol", messages=QUESTION, temperature=0,
                                         max_tokens=4)
    usage = out.usage.model_extra
    assert usage["kv_cap"] == window
    assert usage["kv_used"] == out.usage.prompt_tokens + out.usage.completion_tokens
    long = [{"role": "user", "content": "word " * (window + 100)}]
    err = bad_request(server, {"model": "smol", "messages": long, "max_tokens": 4}, 422)
    assert err["type"] == "context_over_budget"
    assert err["kv_cap"] == window and err["kv_used"] > window
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="smol", messages=long, max_tokens=4)


# ------------------------------------------------------------------------ media

def _png(color=(200, 30, 30)) -> str:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (40, 40), color).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_image_parts_go_through_the_projector(client):
    """Random projector weights: the answer is noise; what is checked is that the image was
    placed in the prompt (its tokens are counted) through the real llama.cpp path."""
    text = [{"role": "user", "content": [{"type": "text", "text": "Describe:"}]}]
    image = [{"role": "user", "content": [
        {"type": "text", "text": "Describe:"},
        {"type": "image_url", "image_url": {"url": _png()}}]}]
    without = client.chat.completions.create(model="smol-vision", messages=text,
                                             temperature=0, max_tokens=4)
    with_image = client.chat.completions.create(model="smol-vision", messages=image,
                                                temperature=0, max_tokens=4)
    assert with_image.usage.prompt_tokens == without.usage.prompt_tokens + 16
    assert with_image.usage.completion_tokens >= 1


# ------------------------------------------------------------------------ 400s

@pytest.mark.parametrize("body,param", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0]"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"response_format": "json"}, "response_format"),
    ({"n": 0}, "n"),
    ({"logprobs": "yes"}, "logprobs"),
])
def test_each_bad_field_is_a_400_naming_it(server, body, param):
    err = bad_request(server, {"model": "smol", "messages": QUESTION, **body})
    assert err["type"] == "invalid_request_error" and err["param"] == param


def test_tools_to_a_model_without_a_tool_format_is_a_400(server):
    err = bad_request(server, {"model": "notools", "messages": QUESTION, "tools": [WEATHER]})
    assert err["param"] == "tools" and "tool" in err["message"]
    ok = httpx.post(server.base + "/v1/chat/completions", timeout=600, json={
        "model": "notools", "messages": QUESTION, "tools": [WEATHER], "tool_choice": "none",
        "max_tokens": 2})
    assert ok.status_code == 200


def test_an_image_to_a_text_only_model_is_a_400_naming_the_modality(server):
    err = bad_request(server, {"model": "smol", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": _png()}}]}]})
    assert "vision" in err["message"]


def test_a_broken_image_is_a_400(server):
    err = bad_request(server, {"model": "smol-vision", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]})
    assert err["type"] == "invalid_request_error"


def test_a_private_image_url_is_refused(server):
    err = bad_request(server, {"model": "smol-vision", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}}]}]})
    assert "image_url.url" in err["param"]
