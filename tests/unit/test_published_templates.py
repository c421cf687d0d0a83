"""What Hypnos reads off each current family's published chat template (tests/data/templates,
as vendored by the pinned llama.cpp): the tool dialect and the thinking delimiters are the
family's own, and the template renders the offered tools (so the native path is taken and
Hypnos does not describe them itself).

Model-free: the template is rendered by llama-cpp-python's Jinja formatter, in Python."""
from pathlib import Path

# llama-cpp-python is a default extra: without it this module fails to import (an error,
# never a skip).
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
import pytest

from hypnos.engines.chat_format import detect, prepare

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]

#: file -> (tool dialect, thinking opener, the dialect's opener as the family writes it)
FAMILIES = {
    "gemma-4-it.jinja": ("gemma", "<|channel>thought\n", "<|tool_call>"),
    "qwen3.5.jinja": ("qwen3_coder", "<think>", "<tool_call>"),
    "nemotron-3-nano.jinja": ("qwen3_coder", "<think>", "<tool_call>"),
    "glm-4.6.jinja": ("glm", "<think>", "<tool_call>"),
    "glm-4.7-flash.jinja": ("glm", "<think>", "<tool_call>"),
    "lfm2.5-instruct.jinja": ("lfm", None, "<|tool_call_start|>"),
    "ministral-3-reasoning.jinja": ("mistral", "[THINK]", "[TOOL_CALLS]"),
    "gpt-oss.jinja": ("harmony", "<|channel|>analysis<|message|>",
                      "<|channel|>commentary to=functions."),
}


def test_every_stored_template_is_checked():
    assert {p.name for p in TEMPLATES.glob("*.jinja")} == set(FAMILIES)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_dialects_read_off_the_template_are_the_familys(name):
    dialect, think, opener = FAMILIES[name]
    fmt = detect((TEMPLATES / name).read_text())
    assert fmt.tools.name == dialect
    assert fmt.tools.openers[0] == opener
    assert (fmt.think.open if fmt.think else None) == think
    assert fmt.template_reads_tools


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_template_renders_the_offered_tools(name):
    template = (TEMPLATES / name).read_text()
    fmt = detect(template)
    prepared = prepare(fmt, ASK, [WEATHER], "auto", None, None)
    assert prepared.tools == [WEATHER]          # handed to the template, not described
    prompt = Jinja2ChatFormatter(template, eos_token="</s>", bos_token="<s>")(
        messages=prepared.messages, tools=prepared.tools, **prepared.template_vars).prompt
    assert "get_weather" in prompt and "Current weather for a city" in prompt
    assert "What's the weather in Paris?" in prompt


def test_glm_46_writes_line_breaks_and_47_does_not():
    assert detect((TEMPLATES / "glm-4.6.jinja").read_text()).tools.nl == "\n"
    assert detect((TEMPLATES / "glm-4.7-flash.jinja").read_text()).tools.nl == ""
