"""Every tool dialect's forced call on the real SmolLM2: the model config's tool_format picks
the dialect, and the grammar built from the tool's JSON schema makes the answer one call. (SmolLM2
knows none of these formats; the grammar is what makes each call well formed.)

What is asserted holds whatever path the model takes on this CPU: the strings are bounded by
``maxLength`` and the numbers by the grammar, so the longest call the grammar admits fits in
``max_tokens`` (every token spells at least one byte), the answer ends where the grammar ends,
and whatever the model wrote under it parses as a call with its required keys typed."""
import json
import threading

import pytest

from conftest import require_smollm2
from hypnos.engines.records import ChatRequest, LoadSpec
from hypnos.engines.chat_format import DIALECTS
from hypnos.engines.llama.engine import LlamaChatEngine

pytestmark = pytest.mark.real
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "maxLength": 40}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What's the weather in Paris for the next 3 days?"}]
#: Above the longest call either tool's grammar admits, in bytes: names, keys and markup,
#: 40 characters of at most 6 bytes each (a JSON escape), 17 per number and at most 22 bytes
#: of whitespace between any two JSON tokens.
MAX_TOKENS = 1024


@pytest.fixture(scope="module", params=sorted(DIALECTS))
def engine(request):
    eng = LlamaChatEngine()
    eng.load(LoadSpec("smol", require_smollm2(), context_len=2048, slots=1,
                      options={"tool_format": request.param}))
    assert eng.format.tools.name == request.param
    yield eng
    eng.unload()


@pytest.mark.parametrize("choice", ["get_weather", "required"])
def test_a_forced_call_parses_with_its_required_keys(engine, choice):
    result = engine.chat(ChatRequest(messages=ASK, tools=[WEATHER, TIME], tool_choice=choice,
                                     temperature=0, max_tokens=MAX_TOKENS),
                         None, threading.Event())
    assert result.tool_call_errors == []
    assert result.finish_reason == "tool_calls", result
    call = result.tool_calls[0]
    args = json.loads(call.arguments)
    if choice == "get_weather":
        assert call.name == "get_weather"
    required = {"get_weather": "city", "get_time": "zone"}[call.name]
    assert isinstance(args[required], str) and args[required]
    if "days" in args:
        assert isinstance(args["days"], int)
    if "unit" in args:
        assert args["unit"] in ("celsius", "fahrenheit")
