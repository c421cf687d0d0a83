"""A forced call always closes (issue #29), on the real SmolLM2 in every tool dialect: with a
free string parameter (no ``maxLength``, as in most real schemas) and a small ``max_tokens``,
a ``required`` or named call ends with ``finish_reason: "tool_calls"`` and every required
key, ``tool_call_truncated`` saying when the engine closed it; below the shortest call's
length the old cut at max_tokens stays.

What is asserted holds whatever path greedy decoding takes on this CPU: the shortest call's
token count is computed from the grammar, a model that cannot end its string (a letter
biased far above every other token) must be closed by the engine, and a call the engine did
not close is the model's own, the same with more tokens to spare.
"""
import json
import threading

import pytest
from gguf import GGUFReader

from conftest import require_smollm2
from hypnos.engines.chat_format import DIALECTS
from hypnos.engines.chat_format.gbnf import compile_gbnf
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest, LoadSpec
from test_http import app_for, call

pytestmark = pytest.mark.real
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string"}}, "required": ["zone"]}}}
TOOLS = [WEATHER, TIME]
REQUIRED = {"get_weather": "city", "get_time": "zone"}
ASK = [{"role": "user", "content": "Describe the weather in Rio de Janeiro over the whole "
                                   "week in great detail."}]
CHOICES = ["get_weather", "required"]


@pytest.fixture(scope="module")
def endless() -> dict[int, float]:
    """A bias that keeps SmolLM2 from ever ending a string: the token "a" at +100, so it is
    the model's choice wherever the grammar admits it (inside a string always, and never
    where a string could end instead)."""
    field = GGUFReader(require_smollm2()).fields["tokenizer.ggml.tokens"]
    texts = [bytes(field.parts[i]).decode() for i in field.data]
    return {texts.index("a"): 100.0}


@pytest.fixture(scope="module", params=sorted(DIALECTS))
def engine(request):
    eng = LlamaChatEngine()
    eng.load(LoadSpec("smol", require_smollm2(), context_len=2048, slots=1,
                      options={"tool_format": request.param}))
    assert eng.format.tools.name == request.param
    yield eng
    eng.unload()


def ask(engine, choice: str, max_tokens: int, **extra):
    return engine.chat(ChatRequest(messages=ASK, tools=TOOLS, tool_choice=choice,
                                   temperature=0, max_tokens=max_tokens, **extra),
                       None, threading.Event())


def shortest_call(engine, choice: str) -> int:
    """Tokens of the shortest call the forced grammar admits."""
    name = None if choice == "required" else choice
    g = compile_gbnf(engine.format.tools.grammar(TOOLS, name))
    return engine.count_tokens(g.closing(g.start))


def assert_whole_call(result, choice: str, max_tokens: int) -> dict:
    assert result.finish_reason == "tool_calls", result
    assert result.tool_call_errors == [] and len(result.tool_calls) == 1
    assert result.completion_tokens <= max_tokens
    call = result.tool_calls[0]
    assert call.name == choice or choice == "required"
    args = json.loads(call.arguments)
    assert isinstance(args[REQUIRED[call.name]], str)
    return {"name": call.name, "arguments": args}


@pytest.mark.parametrize("choice", CHOICES)
def test_a_call_that_cannot_end_its_string_is_closed(engine, endless, choice):
    result = ask(engine, choice, 40, logit_bias=endless)
    assert_whole_call(result, choice, 40)
    assert result.tool_call_truncated is True


@pytest.mark.parametrize("choice", CHOICES)
def test_a_call_closes_at_the_shortest_calls_length(engine, choice):
    least = shortest_call(engine, choice)
    assert_whole_call(ask(engine, choice, least), choice, least)


@pytest.mark.parametrize("choice", CHOICES)
def test_below_the_shortest_call_the_old_cut_stays(engine, choice):
    least = shortest_call(engine, choice)
    result = ask(engine, choice, least - 1)
    assert result.tool_call_truncated is False
    assert result.completion_tokens <= least - 1
    if not result.tool_calls:
        assert result.finish_reason == "length"
        assert result.tool_call_errors[0].code == "unparseable_call"


@pytest.mark.parametrize("choice", CHOICES)
def test_a_call_not_closed_by_the_engine_is_the_models_own(engine, choice):
    """At 40 tokens the call is whole; if the engine did not close it, 16 tokens more change
    nothing (the model had ended it). The same prompt runs first so that both answers start
    from the same cached prefix, hence the same greedy path."""
    ask(engine, choice, 1)
    result = ask(engine, choice, 40)
    call = assert_whole_call(result, choice, 40)
    if not result.tool_call_truncated:
        more = ask(engine, choice, 56)
        assert not more.tool_call_truncated
        assert assert_whole_call(more, choice, 56) == call


@pytest.mark.anyio
async def test_the_choice_says_the_engine_closed_the_call(endless):
    """Over the wire: ``tool_call_truncated: true`` on the choice (and on the last chunk of
    a stream) when the engine closed the call, absent otherwise."""
    app = app_for()
    body = {"model": "chat", "messages": ASK, "tools": TOOLS, "temperature": 0,
            "max_tokens": 40, "logit_bias": {str(k): v for k, v in endless.items()},
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    choice = (await call(app, "post", "/v1/chat/completions", json=body)).json["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["tool_call_truncated"] is True
    call_ = choice["message"]["tool_calls"][0]["function"]
    assert call_["name"] == "get_weather"
    assert isinstance(json.loads(call_["arguments"])["city"], str)
    streamed = await call(app, "post", "/v1/chat/completions", json={**body, "stream": True})
    events = [json.loads(ln[len("data: "):]) for ln in streamed.text.splitlines()
              if ln.startswith("data: {")]
    last = events[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls" and last["tool_call_truncated"] is True
    plain = {"model": "chat", "messages": ASK, "max_tokens": 4}
    choice = (await call(app, "post", "/v1/chat/completions", json=plain)).json["choices"][0]
    assert "tool_call_truncated" not in choice
