"""Tool-call dialects, thinking delimiters, stop strings and the streaming splitter: pure
string work, checked on sample outputs of each model family."""
import json

import pytest

from hypnos.engines.chat_format import detect, prepare, think_budget
from hypnos.engines.chat_format import (
    GemmaDialect, GlmDialect, HermesDialect, JsonDialect, LfmDialect, Llama3Dialect, MistralDialect,
    Qwen3CoderDialect, CallParseError)
from hypnos.engines.chat_format.stream import AnswerSplitter, StopMatcher

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}}]


@pytest.mark.parametrize("template,dialect,think", [
    ("{% for tool in tools %}<|tool_call>{% endfor %}<|channel>", "gemma", "<|channel>thought\n"),
    ("{{ tools }}<tool_call><function=x><parameter=y>", "qwen3_coder", None),
    ("{{ tools }}<tool_call>{{ x }}</tool_call><think>", "hermes", "<think>"),
    ("{{ tools }}<|tool_call_start|>", "lfm", None),
    ("List of tools: [{{ tools }}]", "lfm", None),
    ("{{ tools }}<tool_call>{{ name }}<arg_key>k</arg_key><arg_value>", "glm", None),
    ("{{ tools }}[TOOL_CALLS][THINK]", "mistral", "[THINK]"),
    ("{{ tools }}[TOOL_CALLS]", "mistral", None),
    ("<|start_header_id|>{{ tools }}<|python_tag|>", "llama3", None),
    ("<|im_start|>{{ message['content'] }}", "json", None),
    # Markers without a tools block in the template: Hypnos describes the tools itself.
    ("<tool_call></tool_call>", "json", None),
])
def test_detect_reads_the_family_off_the_template(template, dialect, think):
    fmt = detect(template)
    assert fmt.tools.name == dialect
    assert (fmt.think.open if fmt.think else None) == think


def test_tool_format_config_overrides_and_none_disables():
    assert detect("<|im_start|>", "none").tools is None
    assert detect("<|im_start|>", "mistral").tools.name == "mistral"


@pytest.mark.parametrize("dialect,text,args", [
    (HermesDialect(), '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                      '</tool_call>', {"city": "Paris"}),
    (Qwen3CoderDialect(), "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                          "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                          "</tool_call>", {"city": "Paris", "days": 3}),
    (Llama3Dialect(), '{"name": "get_weather", "parameters": {"city": "Paris"}}',
     {"city": "Paris"}),
    (Llama3Dialect(), '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
     {"city": "Paris"}),
    (MistralDialect(), '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
     {"city": "Paris"}),
    (MistralDialect(), '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', {"city": "Paris"}),
    (LfmDialect(), '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
     {"city": "Paris", "days": 3}),
    (GemmaDialect(), '<|tool_call>call:get_weather{city:<|"|>Paris, FR<|"|>,days:3}<tool_call|>',
     {"city": "Paris, FR", "days": 3}),
    (GemmaDialect("<start_function_call>", "<end_function_call>", "<escape>"),
     "<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>",
     {"city": "Paris"}),
    # GLM-4.7 writes no line breaks, GLM-4.5/4.6 one after the name and after each tag.
    (GlmDialect(), "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris, FR"
                   "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
     {"city": "Paris, FR", "days": 3}),
    (GlmDialect(newline=True), "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>"
                               "Paris</arg_value>\n</tool_call>", {"city": "Paris"}),
])
def test_each_dialect_parses_its_calls(dialect, text, args):
    calls = dialect.parse(text)
    assert [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == args


@pytest.mark.parametrize("dialect", [HermesDialect(), Qwen3CoderDialect(), Llama3Dialect(),
                                     MistralDialect(), LfmDialect(), GemmaDialect(),
                                     GlmDialect(), GlmDialect(newline=True)])
def test_a_rendered_call_parses_back(dialect):
    call = {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    parsed = dialect.parse(dialect.render_call(call))
    assert parsed[0].name == "get_weather"
    assert json.loads(parsed[0].arguments) == call["arguments"]


@pytest.mark.parametrize("dialect,text", [
    (HermesDialect(), "<tool_call>{not json</tool_call>"),
    (LfmDialect(), "<|tool_call_start|>[get_weather(city=]<|tool_call_end|>"),
    (GemmaDialect(), "<|tool_call>get_weather<tool_call|>"),
    (GlmDialect(), "<tool_call><arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"),
])
def test_a_broken_call_raises(dialect, text):
    with pytest.raises(CallParseError):
        dialect.parse(text)


def test_think_budget_levels():
    assert think_budget(None, None, None) == 0          # thinking is off by default
    assert think_budget(True, None, None) is None       # on, unbounded
    assert think_budget(True, "minimal", None) == 512
    assert think_budget(False, "high", None) == 6144    # reasoning_effort wins over think
    assert think_budget(None, "low", 16) == 16          # reasoning_budget wins over both


def test_prepare_forces_a_named_call_and_turns_thinking_off():
    fmt = detect("{{ tools }}<tool_call></tool_call><think>")
    out = prepare(fmt, [{"role": "user", "content": "hi"}], TOOLS, "get_weather", None, None)
    assert out.prefix == "<tool_call>\n"
    assert out.think_budget == 0 and out.template_vars == {"enable_thinking": False}
    assert '"\\"get_weather\\""' in out.grammar and "root ::= call" in out.grammar
    assert out.tools == TOOLS                     # the template renders them itself


def test_prepare_describes_tools_for_a_template_without_them():
    fmt = detect("<|im_start|>{{ message['content'] }}")
    out = prepare(fmt, [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "hi"}], TOOLS, "auto", None, None)
    assert out.tools is None and out.prefix == "" and out.grammar is None
    assert out.messages[0]["content"].startswith("Be brief.")
    assert '"name": "get_weather"' in out.messages[0]["content"]


def test_history_drops_reasoning_and_writes_calls_out_for_plain_templates():
    fmt = detect("<|im_start|>{{ message['content'] }}")
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": None, "reasoning_content": "let me think",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": '{"t": 18}'}]
    out = prepare(fmt, history, TOOLS, "auto", None, None).messages
    assistant = out[-2]
    assert "reasoning_content" not in assistant and "tool_calls" not in assistant
    assert JsonDialect().parse(assistant["content"])[0].name == "get_weather"
    assert out[-1] == {"role": "user", "content": 'Tool result: {"t": 18}'}


def test_history_keeps_calls_as_objects_for_templates_that_render_them():
    fmt = detect("{{ tools }}<tool_call>{{ message.tool_calls }}</tool_call>")
    history = [{"role": "assistant", "content": None, "tool_calls": [{
        "id": "c", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}]
    out = prepare(fmt, history, TOOLS, "auto", None, None).messages
    assert out[0]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}


def feed_all(consumer, pieces):
    out = []
    for p in pieces:
        out.append(consumer.feed(p))
    return out


def test_stop_string_split_over_pieces_never_leaks():
    stop = StopMatcher(["</end>", "STOP"])
    out = feed_all(stop, ["Hello <", "/en", "d> more"])
    assert out == ["Hello ", "", ""] and stop.hit
    stop = StopMatcher(["STOP"])
    out = feed_all(stop, ["a ST", "RANGE b"])
    assert "".join(out) + stop.flush() == "a STRANGE b" and not stop.hit
    assert out[0] == "a "                       # "ST" held back until it could not be a stop


def kinds(pieces):
    return [(p.kind, p.text if p.kind != "call" else p.call.name) for p in pieces]


def test_splitter_sorts_thinking_content_and_calls_across_pieces():
    from hypnos.engines.chat_format import ThinkDialect
    sp = AnswerSplitter(think=ThinkDialect("<think>", "</think>"), tools=HermesDialect(),
                        known=frozenset({"get_weather"}))
    stream = ["<th", "ink>\nhmm, weather", "</thi", "nk>\n\nLet me check.", "<tool_",
              'call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>']
    got = [p for chunk in feed_all(sp, stream) for p in chunk] + sp.finish()
    text = lambda kind: "".join(p.text for p in got if p.kind == kind)  # noqa: E731
    assert text("reasoning") == "hmm, weather"
    assert text("content") == "Let me check."
    assert [p.call.name for p in got if p.kind == "call"] == ["get_weather"]
    # every reasoning piece comes before the first content piece
    order = [p.kind for p in got if p.kind != "call"]
    assert order == sorted(order, key=lambda k: k != "reasoning")


def test_splitter_reports_unknown_functions_and_broken_calls():
    sp = AnswerSplitter(tools=HermesDialect(), known=frozenset({"get_weather"}))
    sp.feed('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>')
    sp.feed("<tool_call>{broken")
    sp.finish()
    assert sp.calls == []
    assert [e.code for e in sp.errors] == ["unknown_function", "unparseable_call"]


def test_splitter_with_a_forced_prefix_reads_the_call_whole():
    sp = AnswerSplitter(tools=HermesDialect(), prefix="<tool_call>\n",
                        known=frozenset({"get_weather"}))
    out = sp.feed('{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
    assert kinds(out + sp.finish()) == [("call", "get_weather")]


def test_splitter_without_think_passes_text_through():
    sp = AnswerSplitter()
    assert "".join(p.text for c in feed_all(sp, ["Hel", "lo <b>"]) for p in c) == "Hello <b>"
