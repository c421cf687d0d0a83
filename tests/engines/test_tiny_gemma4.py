"""Gemma 4 through the real llama engine, on a tiny random-weight GGUF of the family's file
format carrying Google's published Gemma 4 chat template (``tests/tiny_gemma4.py``).

This proves plumbing, not quality: the pinned llama.cpp loads a ``gemma4`` file with its
keys, tensors and vocabulary; the template renders the offered tools and the thinking switch
through the engine; the dialects detected are Gemma 4's (``<|tool_call>call:f{k:<|"|>v<|"|>}
<tool_call|>`` and the ``<|channel>thought`` block); a forced call comes out under the grammar
and parses, whatever the noise weights pick on this CPU; the same request twice answers the
same. Nothing here says what a real Gemma 4 would answer."""
import json
import threading

import pytest

from tiny_checks import (ASK, MAX_TOKENS, TIME, WEATHER, check_forced_call,
                         check_free_answer)
from tiny_checks import prompt_text as rendered
from tiny_gemma4 import write_tiny_gemma4
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.chat_format import GemmaDialect
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest, LoadSpec
from hypnos.engines.gguf_meta import read_gguf_meta

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    return write_tiny_gemma4(tmp_path_factory.mktemp("gemma4") / "tiny-gemma4.gguf")


@pytest.fixture(scope="module")
def engine(gguf_path):
    eng = LlamaChatEngine()
    eng.load(LoadSpec("tiny-gemma4", gguf_path, context_len=2048, slots=1))
    yield eng
    eng.unload()


def test_the_file_is_what_the_catalog_says_gemma4_is(gguf_path):
    meta = read_gguf_meta(gguf_path)
    assert meta.architecture == "gemma4"
    gemma4 = [e for e in load_catalog().entries if e.id.startswith("gemma4:")]
    assert gemma4 and {e.architecture for e in gemma4} == {"gemma4"}


def test_the_dialects_detected_are_gemma4s(engine):
    assert isinstance(engine.format.tools, GemmaDialect)
    assert engine.format.tools.quote == '<|"|>'
    assert engine.format.think.open == "<|channel>thought\n"
    assert engine.format.think.close == "<channel|>"
    assert engine.format.template_reads_tools and engine.format.template_reads_tool_calls


def test_the_template_renders_the_tools_as_declarations(engine):
    text = rendered(engine, ASK, [WEATHER, TIME], tool_choice="auto")
    assert text.startswith("<bos><|turn>system\n")
    assert '<|tool>declaration:get_weather{description:<|"|>Current weather for a city<|"|>' \
        in text
    assert "<|tool>declaration:get_time{" in text
    assert "<|turn>user\nWhat's the weather in Paris?<turn|>" in text


def test_the_thinking_switch_reaches_the_template(engine):
    on = rendered(engine, ASK, think_budget=None)
    off = rendered(engine, ASK, think_budget=0)
    assert "<|think|>" in on and on.endswith("<|turn>model\n")
    assert "<|think|>" not in off and off.endswith("<|channel>thought\n<channel|>")


def test_history_calls_and_results_render_in_gemma4_markup(engine):
    history = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp_c": 21})}]
    text = rendered(engine, history, [WEATHER])
    assert '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>' in text
    assert "<|tool_response>response:get_weather{" in text


@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_a_forced_call_parses(engine, choice):
    check_forced_call(engine, choice)


def test_a_free_answer_with_thinking_on_never_shows_the_markers(engine):
    check_free_answer(engine, ("<|channel>", "<channel|>", "<turn|>"), None)


def test_llama_cpp_loads_a_split_gguf_from_its_first_part(tmp_path):
    """The catalog's split models (gpt-oss-120b ...) are configured by their first part."""
    first = write_tiny_gemma4(tmp_path / "g4.gguf", split_tensors=10)
    eng = LlamaChatEngine()
    try:
        eng.load(LoadSpec("tiny-gemma4-split", first, context_len=512, slots=1))
        # Every part's tensors are in the loaded model, not only the first part's (none).
        assert eng._ll.llama_model_size(eng._model) == read_gguf_meta(first).tensor_bytes
        result = eng.chat(ChatRequest(messages=ASK, tools=[WEATHER], tool_choice="required",
                                      temperature=0, max_tokens=MAX_TOKENS),
                          None, threading.Event())
        assert result.tool_call_errors == [] and result.tool_calls
    finally:
        eng.unload()
