"""Qwen3.5's architecture (qwen35: Qwen3.5, Qwen3.6, Qwen3.8, MiniCPM-V 4.6's text model)
through the real llama engine, on a tiny random-weight GGUF of the family's file format
carrying Qwen's published Qwen3.5 template (``tests/tiny_qwen35.py``).

This proves plumbing, not quality: the pinned llama.cpp loads a hybrid Gated DeltaNet /
attention file and keeps its recurrent state across requests; the template renders the tools
and opens the <think> block through the engine; the dialect detected is Qwen3-Coder's XML
calls; a forced call comes out under the grammar and parses, whatever the noise weights pick;
the same request twice answers the same (which a recurrent state left over from the first
request would break)."""
import pytest

from tiny_checks import ASK, TIME, WEATHER, check_forced_call, check_free_answer, prompt_text
from tiny_qwen35 import write_tiny_qwen35
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.chat_format import Qwen3CoderDialect
from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import LoadSpec

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    return write_tiny_qwen35(tmp_path_factory.mktemp("qwen35") / "tiny-qwen35.gguf")


@pytest.fixture(scope="module")
def engine(gguf_path):
    eng = LlamaChatEngine()
    eng.load(LoadSpec("tiny-qwen35", gguf_path, context_len=2048, slots=1))
    yield eng
    eng.unload()


def test_the_catalogs_qwen35_entries_name_this_architecture(gguf_path):
    assert read_gguf_meta(gguf_path).architecture == "qwen35"
    ids = {e.id for e in load_catalog().entries if e.architecture == "qwen35"}
    assert {"qwen3.6:27b", "qwen3.8:27b"} <= ids


def test_the_dialects_detected_are_qwens(engine):
    assert isinstance(engine.format.tools, Qwen3CoderDialect)
    assert engine.format.think.open == "<think>" and engine.format.think.close == "</think>"


def test_the_template_renders_tools_and_the_thinking_switch(engine):
    text = prompt_text(engine, ASK, [WEATHER, TIME], tool_choice="auto", think_budget=None)
    assert "<tools>" in text and '"name": "get_weather"' in text and '"name": "get_time"' in text
    assert "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    off = prompt_text(engine, ASK, think_budget=0)
    assert off.endswith("</think>\n\n") and "<think>" in off


@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_a_forced_call_parses(engine, choice):
    check_forced_call(engine, choice)


@pytest.mark.parametrize("budget", [0, None])
def test_a_free_answer_never_shows_the_markers(engine, budget):
    check_free_answer(engine, ("<think>", "</think>", "<tool_call>", "<|im_end|>"), budget)
