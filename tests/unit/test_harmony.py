"""gpt-oss's harmony messages read into reasoning, content and calls, however the stream is
cut: the analysis channel is the reasoning, the final channel the answer, a commentary message
to=functions.NAME a call; the control tokens that end a message (<|end|>, <|return|>,
<|call|>) are unrendered by llama.cpp, so the next header ends a body too. The published
gpt-oss template is what Hypnos detects and renders. Pure string work, no model."""
import json
import random
from pathlib import Path

# llama-cpp-python is a default extra: without it this module fails to import (an error,
# never a skip).
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
import pytest

from hypnos.engines.chat_format import detect, prepare
from hypnos.engines.chat_format.harmony import HarmonySplitter
from hypnos.engines.chat_format.markup_dialects import HarmonyDialect

TEMPLATE = (Path(__file__).resolve().parents[1] / "data" / "templates" /
            "gpt-oss.jinja").read_text()
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def split(text: str, tools=True, prefix="", forced=False, seed=0):
    """Feed ``text`` in random cuts; (reasoning, content, calls, errors)."""
    sp = HarmonySplitter(tools=HarmonyDialect() if tools else None, prefix=prefix,
                         known=frozenset({"get_weather"}), offered=[WEATHER], forced=forced)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), min(7, len(text) - 1)))
    pieces = []
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        pieces += sp.feed(text[a:b])
    pieces += sp.finish()
    join = lambda kind: "".join(p.text for p in pieces if p.kind == kind)  # noqa: E731
    calls = [(p.call.name, json.loads(p.call.arguments)) for p in pieces if p.kind == "call"]
    return join("reasoning"), join("content"), calls, sp.errors


ANSWERS = {
    # as llama.cpp renders it: <|end|> and <|return|> are control tokens, shown as nothing
    "unrendered": "<|channel|>analysis<|message|>The user wants the weather.<|start|>assistant"
                  "<|channel|>final<|message|>It is sunny in Paris.",
    "rendered": "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>"
                "assistant<|channel|>final<|message|>It is sunny in Paris.<|return|>",
}


@pytest.mark.parametrize("name", sorted(ANSWERS))
@pytest.mark.parametrize("seed", range(4))
def test_analysis_is_reasoning_and_final_is_content(name, seed):
    reasoning, content, calls, errors = split(ANSWERS[name], seed=seed)
    assert reasoning == "The user wants the weather."
    assert content == "It is sunny in Paris."
    assert calls == [] and errors == []


@pytest.mark.parametrize("text", [
    "<|channel|>analysis<|message|>Call the tool.<|start|>assistant<|channel|>commentary "
    'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}',
    '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>'
    '{"city": "Paris"}<|call|>',
])
@pytest.mark.parametrize("seed", range(4))
def test_a_commentary_message_to_a_function_is_a_call(text, seed):
    _reasoning, content, calls, errors = split(text, seed=seed)
    assert calls == [("get_weather", {"city": "Paris"})]
    assert content == "" and errors == []


@pytest.mark.parametrize("text,kind", [
    ('<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{}',
     "unknown_function"),
    ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":',
     "unparseable_call"),
])
def test_a_bad_call_is_an_error_not_content(text, kind):
    _r, content, calls, errors = split(text)
    assert calls == [] and content == ""
    assert [e.code for e in errors] == [kind]


def test_text_without_framing_is_content():
    assert split("Just an answer, no channels.")[1] == "Just an answer, no channels."


def test_a_forced_call_reads_the_prefix_as_its_header():
    dialect = HarmonyDialect()
    for name, generated in ((None, 'get_weather <|constrain|>json<|message|>{"city": "Oslo"}'),
                            ("get_weather", '{"city": "Oslo"}')):
        _r, content, calls, errors = split(generated, prefix=dialect.forced_prefix(name),
                                           forced=True)
        assert calls == [("get_weather", {"city": "Oslo"})] and errors == [] and content == ""


def test_the_template_is_detected_and_renders_tools_effort_and_history():
    fmt = detect(TEMPLATE)
    assert fmt.harmony and isinstance(fmt.tools, HarmonyDialect)
    assert fmt.think.open == "<|channel|>analysis<|message|>"
    history = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 21}'}]
    for budget, effort in ((0, "low"), (2048, "medium"), (6144, "high")):
        prepared = prepare(fmt, history, [WEATHER], "auto", budget, None)
        assert prepared.template_vars["reasoning_effort"] == effort
        prompt = Jinja2ChatFormatter(TEMPLATE, eos_token="<|return|>", bos_token="")(
            messages=prepared.messages, tools=prepared.tools, **prepared.template_vars).prompt
        assert f"Reasoning: {effort}" in prompt
        assert "type get_weather = " in prompt and "// Current weather for a city" in prompt
        assert "<|start|>assistant to=functions.get_weather<|channel|>commentary json" \
            "<|message|>" in prompt
        assert "<|start|>functions.get_weather to=assistant<|channel|>commentary" in prompt
        assert prompt.endswith("<|start|>assistant")
