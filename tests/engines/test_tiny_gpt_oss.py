"""gpt-oss (harmony) through the real llama engine, on a tiny random-weight GGUF of the
family's file format carrying OpenAI's published template (``tests/tiny_gpt_oss.py``).

This proves plumbing, not quality: the pinned llama.cpp loads a ``gpt-oss`` file; the
template renders the tools (as a TypeScript namespace) and the reasoning effort through the
engine; the answer is read by the harmony reader (no marker reaches the text); a forced call
comes out under the grammar, stops at the <|call|> end-of-generation token and parses,
whatever the noise weights pick; the same request twice answers the same."""
import pytest

from tiny_checks import (ASK, TIME, WEATHER, check_forced_call, check_free_answer,
                         prompt_text)
from tiny_gpt_oss import write_tiny_gpt_oss
from hypnos.engines.chat_format.harmony import HarmonySplitter
from hypnos.engines.chat_format.markup_dialects import HarmonyDialect
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest, LoadSpec

pytestmark = pytest.mark.real
MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = write_tiny_gpt_oss(tmp_path_factory.mktemp("gpt-oss") / "tiny-gpt-oss.gguf")
    eng = LlamaChatEngine()
    eng.load(LoadSpec("tiny-gpt-oss", path, context_len=2048, slots=1))
    yield eng
    eng.unload()


def test_the_format_is_harmony(engine):
    assert engine.format.harmony
    assert isinstance(engine.format.tools, HarmonyDialect)
    assert engine.format.think.open == "<|channel|>analysis<|message|>"
    built = engine._build(ChatRequest(messages=ASK))
    assert isinstance(built.splitter, HarmonySplitter)


def test_the_template_renders_tools_and_effort_through_the_engine(engine):
    text = prompt_text(engine, ASK, [WEATHER, TIME], tool_choice="auto", think_budget=6144)
    assert "Reasoning: high" in text
    assert "namespace functions" in text and "type get_weather = " in text
    assert "// Current weather for a city" in text and "type get_time = " in text
    assert "<|start|>user<|message|>What's the weather in Paris?<|end|>" in text
    assert text.endswith("<|start|>assistant")
    assert "Reasoning: low" in prompt_text(engine, ASK, think_budget=0)


@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_a_forced_call_parses(engine, choice):
    check_forced_call(engine, choice)


@pytest.mark.parametrize("budget", [0, None])
def test_a_free_answer_never_shows_the_markers(engine, budget):
    check_free_answer(engine, MARKERS, budget)
