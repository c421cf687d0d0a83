"""What the tests of a family's tiny random-weight GGUF (tests/tiny_*.py) check through the
real llama engine, shared by every family: the prompt as the engine renders it, and a forced
call that must parse whatever the noise weights pick on this CPU."""
import ctypes
import json
import threading

from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone",
    "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "maxLength": 24}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
#: Above the longest call any dialect's grammar admits for these tools: the name, the
#: markup, 24 characters of at most 6 bytes each per string (a JSON escape), the enum and
#: bounded JSON whitespace, each token spelling at least one byte.
MAX_TOKENS = 512


def prompt_text(eng: LlamaChatEngine, messages, tools=None, **kw) -> str:
    """The prompt the engine would send, detokenized with its markers shown."""
    tokens = eng._build(ChatRequest(messages=messages, tools=tools, **kw)).prompt
    ll = eng._ll
    arr = (ll.llama_token * len(tokens))(*tokens)
    cap = 16 * len(tokens) + 64
    buf = ctypes.create_string_buffer(cap)
    n = ll.llama_detokenize(eng._vocab, arr, len(tokens), buf, cap, False, True)
    assert n >= 0
    return buf.raw[:n].decode("utf-8", "replace")


def check_forced_call(eng: LlamaChatEngine, choice: str) -> None:
    """A forced call (``required`` or a tool's name) is one call that parses, with the
    required key typed, and the same request twice answers the same."""
    def ask():
        return eng.chat(ChatRequest(messages=ASK, tools=[WEATHER, TIME], tool_choice=choice,
                                    temperature=0, max_tokens=MAX_TOKENS),
                        None, threading.Event())
    result = ask()
    assert result.tool_call_errors == []
    assert result.finish_reason == "tool_calls", result
    assert len(result.tool_calls) == 1
    call = result.tool_calls[0]
    if choice != "required":
        assert call.name == choice
    args = json.loads(call.arguments)
    required = {"get_weather": "city", "get_time": "zone"}[call.name]
    assert isinstance(args[required], str)
    assert args.get("unit", "celsius") in ("celsius", "fahrenheit")
    again = ask()
    assert [(c.name, c.arguments) for c in again.tool_calls] == \
        [(c.name, c.arguments) for c in result.tool_calls]


def check_free_answer(eng: LlamaChatEngine, markers, think_budget) -> None:
    """An unconstrained answer ends normally and shows none of the family's markers."""
    result = eng.chat(ChatRequest(messages=ASK, temperature=0, max_tokens=32,
                                  think_budget=think_budget), None, threading.Event())
    assert result.finish_reason in ("stop", "length")
    for marker in markers:
        assert marker not in result.text and marker not in result.reasoning
