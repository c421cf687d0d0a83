"""Loose tool calls (issue #29): the JSON calls trained models write outside their dialect,
bare or fenced, read as calls only when the whole answer is calls of offered tools with
conforming arguments; everything else stays text. Pure: the reader, its streaming half,
the schema subset, and ``AnswerSplitter`` fed whole and split at every boundary."""
import json

import pytest

from hypnos.engines.chat_format import (HermesDialect, JsonDialect, Llama3Dialect,
                                        MistralDialect, ThinkDialect)
from hypnos.engines.chat_format.loose_calls import conforms, may_be_loose, read_loose
from hypnos.engines.chat_format.stream import AnswerSplitter


def tool(name: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


WEATHER = tool("get_weather", {"city": {"type": "string"},
                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               ["city"])
TIME = tool("get_time", {"city": {"type": "string"}}, ["city"])
TOOLS = [WEATHER, TIME]
PARIS = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TOKYO = '{"name": "get_time", "arguments": {"city": "Tokyo"}}'

# Answers that are calls: (text, [(name, arguments)]). The first ones are what
# Qwen2.5-Coder-0.5B wrote for the prompts of issue #29.
CALLS = [
    ('```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```',
     [("get_weather", {"city": "Paris"})]),
    (PARIS, [("get_weather", {"city": "Paris"})]),
    (f"```\n{TOKYO}\n```", [("get_time", {"city": "Tokyo"})]),
    (f"\n  {PARIS}\n\n", [("get_weather", {"city": "Paris"})]),
    (f"```JSON {PARIS} ```", [("get_weather", {"city": "Paris"})]),
    (f"[{PARIS}, {TOKYO}]", [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Tokyo"})]),
    (f"```json\n[{PARIS},\n {TOKYO}]\n```",
     [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Tokyo"})]),
    (f"{PARIS}\n{TOKYO}", [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Tokyo"})]),
    (f"```json\n{PARIS}\n```\n```json\n{TOKYO}\n```",
     [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Tokyo"})]),
    ('{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\", \\"unit\\": \\"celsius\\"}"}',
     [("get_weather", {"city": "Paris", "unit": "celsius"})]),
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}',
     [("get_weather", {"city": "Paris"})]),
    ('{"arguments": {"city": "Paris"}, "name": "get_weather"}',
     [("get_weather", {"city": "Paris"})]),
    ('{"name": "get_weather", "arguments": {"city": "Pa`ris\\""}}',
     [("get_weather", {"city": 'Pa`ris"'})]),
]

# Answers that are text, with why.
TEXTS = [
    '{"name": "Joke", "arguments": {"joke": "Why did the tomato turn red?"}}',   # not offered
    '```json\n{"name": "get_news", "arguments": {"city": "Paris"}}\n```',        # not offered
    '{"name": "get_weather", "arguments": {}}',                                  # required
    '{"name": "get_weather", "arguments": {"city": 75}}',                        # type
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}}',  # enum
    '{"name": "get_weather", "arguments": "not json"}',                          # args string
    '{"name": "get_weather", "arguments": ["Paris"]}',                           # args array
    '{"name": "get_weather", "arguments": {"city": "Paris"}, "result": "sunny"}',  # extra key
    '{"name": "get_weather", "arguments": {"city": "Paris"}, "parameters": {}}',  # both
    f"Sure! {PARIS}",                                                            # prose first
    f"{PARIS}\nThis calls the weather tool.",                                    # prose after
    f"```json\n{PARIS}\n```\nThat is the call.",
    f"Here you go:\n```json\n{PARIS}\n```",
    f"```python\n{PARIS}\n```",                                                  # not JSON
    f"```json\n{PARIS}",                                                         # unclosed
    f"[{PARIS}, 3]",                                                             # not all calls
    f"[{PARIS}, " + '{"name": "Joke", "arguments": {}}]',
    "[]", "{}", "[1, 2, 3]", '{"city": "Paris"}', '{"name": "get_weather"',       # cut short
    "```json\n```", "`get_weather(city='Paris')`", "[Paris](https://paris.fr) is nice.",
]


def names_args(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("text,expected", CALLS)
def test_read_loose_reads_whole_answers_of_calls(text, expected):
    assert names_args(read_loose(text, TOOLS)) == expected


@pytest.mark.parametrize("text", TEXTS)
def test_read_loose_leaves_everything_else_as_text(text):
    assert read_loose(text, TOOLS) is None


def test_read_loose_needs_offered_tools():
    assert read_loose(PARIS, None) is None and read_loose(PARIS, [TIME]) is None


def test_a_tool_without_a_schema_takes_any_object_and_no_arguments():
    bare = {"type": "function", "function": {"name": "now"}}
    assert names_args(read_loose('{"name": "now"}', [bare])) == [("now", {})]
    assert names_args(read_loose('{"name": "now", "arguments": {"tz": 1}}', [bare])) == \
        [("now", {"tz": 1})]
    assert read_loose('{"name": "now", "arguments": 1}', [bare]) is None


@pytest.mark.parametrize("text", [t for t, _ in CALLS])
def test_every_prefix_of_a_call_may_still_be_one(text):
    """The streaming half never releases an answer the end would read as calls."""
    for n in range(len(text) + 1):
        assert may_be_loose(text[:n], TOOLS), text[:n]


@pytest.mark.parametrize("head", [
    "Hello", "`get", "```python\n", "```jsonx", '{"city"', '{"nam ', '{"name": "Joke"',
    '{"name": "get_weatherX', '{"name": 3', "[1", "[ ]", "{}", '{"name": "get_time"} Sure',
    f"```json\n{PARIS}\n``` and", '{"arguments": {}}, "x"', f"{PARIS}, 3",
])
def test_a_head_that_cannot_become_calls_is_released(head):
    assert not may_be_loose(head, TOOLS)


@pytest.mark.parametrize("head", [
    "", "  ", "`", "``", "```", "```js", "```json", "```json\n{", '{"na', '{"name": "get_',
    '{"name": "get_weather", "arguments": {"city": "Pa', '[{"name": "get_time"', f"{PARIS}\n`",
    '{"name": "get_\\u0077', '{"argu', f"```json\n{PARIS}\n``",
])
def test_a_head_that_can_still_become_calls_is_held(head):
    assert may_be_loose(head, TOOLS)


# --------------------------------------------------------------------- the schema subset

@pytest.mark.parametrize("value,schema,ok", [
    ("a", {"type": "string"}, True), (1, {"type": "string"}, False),
    (3, {"type": "integer"}, True), (3.0, {"type": "integer"}, True),
    (3.5, {"type": "integer"}, False), (True, {"type": "integer"}, False),
    (3.5, {"type": "number"}, True), (False, {"type": "number"}, False),
    (True, {"type": "boolean"}, True), (None, {"type": "null"}, True),
    (None, {"type": ["string", "null"]}, True), (2, {"type": ["string", "null"]}, False),
    ("c", {"enum": ["c", "f"]}, True), ("k", {"enum": ["c", "f"]}, False),
    (True, {"enum": [1]}, False), (1, {"const": 1}, True), (2, {"const": 1}, False),
    ([1, 2], {"type": "array", "items": {"type": "integer"}}, True),
    ([1, "2"], {"type": "array", "items": {"type": "integer"}}, False),
    ({"a": {"b": 1}}, {"type": "object", "properties": {"a": {
        "type": "object", "properties": {"b": {"type": "string"}}}}}, False),
    ({"a": {"b": "x"}}, {"type": "object", "properties": {"a": {
        "type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}}}, True),
    ({"a": {}}, {"properties": {"a": {"required": ["b"]}}}, False),
    ({"x": 1}, {"type": "object", "additionalProperties": False}, False),
    ({"x": 1}, {"type": "object", "additionalProperties": {"type": "string"}}, False),
    ({"x": "1"}, {"type": "object", "additionalProperties": {"type": "string"}}, True),
    ({"x": 1}, {"type": "object"}, True),
    ("a", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, True),
    ("a", {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, False),
    ("a", {"allOf": [{"type": "string"}, {"enum": ["b"]}]}, False),
    ("a", {"type": "string", "format": "date-time", "minLength": 5, "x-custom": 1}, True),
    ("a", {"type": "strange-type"}, True), ("a", True, True), ("a", False, False),
])
def test_conforms_to_the_schema_subset_tools_use(value, schema, ok):
    assert conforms(value, schema) is ok


# --------------------------------------------------------------------- the splitter

def splitter(dialect=None, tools=TOOLS, think=None, forced=False, prefix=""):
    names = frozenset(t["function"]["name"] for t in tools or ())
    return AnswerSplitter(think=think, tools=dialect or HermesDialect(), known=names,
                          offered=tools, forced=forced, prefix=prefix)


def run(sp, pieces):
    """Feed ``pieces``; (what came out, as (kind, text or call) per piece, and the
    splitter)."""
    out = [p for chunk in pieces for p in sp.feed(chunk)] + sp.finish()
    return out, sp


def summary(out, sp):
    content = "".join(p.text for p in out if p.kind == "content")
    reasoning = "".join(p.text for p in out if p.kind == "reasoning")
    calls = [(p.call.name, json.loads(p.call.arguments)) for p in out if p.kind == "call"]
    assert calls == [(c.name, json.loads(c.arguments)) for c in sp.calls]
    return reasoning, content, calls, [e.code for e in sp.errors]


def splits(text):
    """The text whole, one character a piece, and cut in two at every point."""
    yield [text]
    yield list(text)
    for n in range(1, len(text)):
        yield [text[:n], text[n:]]


NATIVE = "<tool_call>\n" + PARIS + "\n</tool_call>"


@pytest.mark.parametrize("text,expected", CALLS + [(NATIVE, [("get_weather", {"city": "Paris"})])])
def test_splitter_reads_calls_the_same_however_the_answer_is_cut(text, expected):
    for pieces in splits(text):
        got = summary(*run(splitter(), pieces))
        assert got == ("", "", expected, []), pieces


@pytest.mark.parametrize("text", TEXTS)
def test_splitter_leaves_text_unchanged_however_the_answer_is_cut(text):
    for pieces in splits(text):
        assert summary(*run(splitter(), pieces)) == ("", text, [], []), pieces


def test_a_native_call_inside_held_json_is_still_read_natively():
    """A held answer that is not loose calls is read as if never held: the dialect's call
    search sees it (here a Hermes call after a bracket)."""
    text = "[" + NATIVE + "]"
    for pieces in splits(text):
        assert summary(*run(splitter(), pieces)) == \
            ("", "[]", [("get_weather", {"city": "Paris"})], []), pieces


def test_loose_calls_after_thinking():
    think = ThinkDialect("<think>", "</think>")
    text = "<think>\nThe user wants weather.\n</think>\n\n```json\n" + PARIS + "\n```"
    for pieces in splits(text):
        got = summary(*run(splitter(think=think), pieces))
        assert got == ("The user wants weather.\n", "", [("get_weather", {"city": "Paris"})],
                       []), pieces


def test_other_answers_stream_with_no_added_delay():
    sp = splitter()
    assert [p.text for p in sp.feed("Hello")] == ["Hello"]
    sp = splitter()
    assert sp.feed("```") == []                         # may still be ```json...: held
    assert [p.text for p in sp.feed("py")] == ["```py"]
    sp = splitter()
    assert sp.feed('{"name": "get_') == []
    assert [p.text for p in sp.feed('news", ')] == ['{"name": "get_news", ']
    sp = splitter()
    assert [p.text for p in sp.feed('{"name": "Jo')] == ['{"name": "Jo']
    sp = splitter()
    assert sp.feed("  ") == []                          # blank so far: undecided
    assert [p.text for p in sp.feed("[1]")] == ["  [1]"]


def test_a_held_call_comes_out_at_the_end_only():
    sp = splitter()
    assert sp.feed("```json\n" + PARIS + "\n```") == []
    assert [(p.kind, p.call.name) for p in sp.finish()] == [("call", "get_weather")]


def test_no_loose_calls_without_active_tools_or_when_forced():
    sp = AnswerSplitter(tools=None, offered=TOOLS)      # tool_choice "none": tools inactive
    assert summary(*run(sp, [PARIS])) == ("", PARIS, [], [])
    sp = AnswerSplitter(tools=HermesDialect())          # no tools offered
    assert summary(*run(sp, [PARIS])) == ("", PARIS, [], [])
    sp = splitter(forced=True, prefix="<tool_call>\n")  # a forced call reads its grammar's form
    assert summary(*run(sp, [PARIS + "\n</tool_call>"]))[2] == [("get_weather",
                                                                  {"city": "Paris"})]


def test_content_after_a_native_call_is_not_read_as_loose_calls():
    text = NATIVE + "\n" + TOKYO
    got = summary(*run(splitter(), [text]))
    assert got == ("", TOKYO, [("get_weather", {"city": "Paris"})], [])


@pytest.mark.parametrize("dialect", [JsonDialect(), Llama3Dialect(), MistralDialect()])
def test_json_dialects_read_fenced_and_bare_calls(dialect):
    for text in ("```json\n" + PARIS + "\n```", PARIS, f"[{PARIS}, {TOKYO}]"):
        calls = summary(*run(splitter(dialect), list(text)))[2]
        assert calls[0] == ("get_weather", {"city": "Paris"}), (dialect.name, text)


def test_native_mistral_and_llama3_calls_still_read_natively():
    mistral = "[TOOL_CALLS]" + json.dumps([json.loads(PARIS)])
    assert summary(*run(splitter(MistralDialect()), list(mistral)))[2] == \
        [("get_weather", {"city": "Paris"})]
    # Llama 3's native opener is the JSON object: a tool nobody offered stays its error.
    joke = '{"name": "Joke", "parameters": {}}'
    assert summary(*run(splitter(Llama3Dialect()), list(joke)))[3] == ["unknown_function"]
