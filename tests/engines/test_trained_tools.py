"""Tool calling on a trained model (issue #29): Qwen2.5-Coder-0.5B-Instruct (catalog id
``qwen2.5-coder:0.5b``, Hermes ``<tool_call>`` template) served by ``hypnos serve``, asked
through ``/v1/chat/completions`` with the official ``openai`` client, temperature 0 and a
fixed seed.

These tests make quality claims about what the trained model does, each stated in its
docstring; they assert what it does robustly (which tool, which city, a number carried over),
never an exact text, so they hold whatever path greedy decoding takes on a machine. Under
``tool_choice: "auto"`` this model writes its calls as JSON, bare or in a ```json fence,
rather than in its template's tags; ``engines/chat_format/loose_calls`` reads those."""
import json
import sys

import openai
import pytest

from conftest import MODELS_DIR, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]

CODER = MODELS_DIR / "qwen2.5-coder-0.5b" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SEED = 7
MAX_TOKENS = 80


def city_tool(name: str, description: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description, "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}


WEATHER = city_tool("get_weather", "Current weather for a city")
TIME = city_tool("get_time", "Current local time in a city")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not CODER.exists():
        pytest.fail(f"{CODER} is missing: run `hypnos models pull qwen2.5-coder:0.5b` first")
    tmp = tmp_path_factory.mktemp("trained-tools")
    config = tmp / "hypnos.toml"
    config.write_text(f'models_dir = "{MODELS_DIR}"\n[[models]]\nid = "coder"\n'
                      'modality = "text_generation"\nengine = "ggml_llama"\n'
                      f'weights_path = "{CODER.relative_to(MODELS_DIR)}"\n'
                      'context_len = 4096\n')
    srv = ServerProcess(config, tmp / "server.log", ready_timeout=300,
                        env={"HYPNOS_MODELS_DIR": str(MODELS_DIR)})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0,
                         timeout=600)


def ask(client, prompt: str, tools: list[dict], **kw):
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    return client.chat.completions.create(
        model="coder", messages=messages, tools=tools, temperature=0, seed=SEED,
        max_tokens=MAX_TOKENS, **kw).choices[0]


def only_call(choice):
    """The one tool call of an answer that is a call (and nothing else)."""
    assert choice.finish_reason == "tool_calls", choice
    assert not choice.message.content, choice.message.content
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id
    return call.function.name, json.loads(call.function.arguments)


def test_auto_calls_the_weather_tool_for_a_weather_question(client):
    """Claim: asked "What's the weather in Paris?" with a weather tool offered and
    tool_choice auto, the 0.5B calls get_weather with a city naming Paris."""
    name, args = only_call(ask(client, "What's the weather in Paris?", [WEATHER],
                               tool_choice="auto"))
    assert name == "get_weather" and "Paris" in args["city"]


def test_auto_streams_the_same_call(client):
    """Claim: the same request streamed gives the same call, whole in one chunk, no content
    (the held JSON never leaks as text), and finish_reason tool_calls."""
    stream = client.chat.completions.create(
        model="coder", messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[WEATHER], tool_choice="auto", temperature=0, seed=SEED, max_tokens=MAX_TOKENS,
        stream=True)
    calls, content, finish = [], "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        calls += delta.tool_calls or []
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == "" and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    assert "Paris" in json.loads(calls[0].function.arguments)["city"]


def test_required_calls_the_weather_tool(client):
    """Claim: with tool_choice required (a forced call), the 0.5B calls get_weather for
    Paris."""
    name, args = only_call(ask(client, "What's the weather in Paris?", [WEATHER],
                               tool_choice="required"))
    assert name == "get_weather" and "Paris" in args["city"]


@pytest.mark.parametrize("prompt,tool,city", [
    ("What's the weather in Paris?", "get_weather", "Paris"),
    ("What time is it in Tokyo?", "get_time", "Tokyo"),
])
def test_of_two_tools_it_picks_the_one_the_question_needs(client, prompt, tool, city):
    """Claim: offered get_weather and get_time (auto), the 0.5B calls the one the question
    is about, for the city it names."""
    name, args = only_call(ask(client, prompt, [WEATHER, TIME], tool_choice="auto"))
    assert name == tool and city in args["city"]


def test_a_tool_result_is_used_in_the_answer(client):
    """Claim: after its own get_weather call comes back with a temperature, the 0.5B's next
    answer is text, not another call, and carries that temperature. (It restates the result,
    often as JSON, rather than composing a sentence; what it says robustly is the number.)"""
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    first = ask(client, messages, [WEATHER], tool_choice="auto")
    name, _ = only_call(first)
    call = first.message.tool_calls[0]
    messages += [{"role": "assistant", "content": None, "tool_calls": [{
                     "id": call.id, "type": "function",
                     "function": {"name": name, "arguments": call.function.arguments}}]},
                 {"role": "tool", "tool_call_id": call.id,
                  "content": json.dumps({"temperature": 23, "condition": "sunny"})}]
    answer = ask(client, messages, [WEATHER], tool_choice="auto")
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert "23" in answer.message.content, answer.message.content


def test_a_joke_calls_no_tool_nobody_offered(client):
    """Claim: asked for a joke with the two city tools offered, the answer is text or a call
    of an offered tool, never a call of a tool that was not offered (the 0.5B writes a JSON
    "call" of a made-up tool, which must stay text)."""
    choice = ask(client, "Tell me a joke.", [WEATHER, TIME], tool_choice="auto")
    names = [c.function.name for c in choice.message.tool_calls or []]
    assert set(names) <= {"get_weather", "get_time"}
    assert names or choice.message.content
    assert (choice.finish_reason == "tool_calls") == bool(names)
