"""Which dialects a model family uses, read off its GGUF chat template: ``detect`` looks for
the markers of each family's tool calls and thinking block in the Jinja template.

Pure string work (no llama.cpp), unit-tested on sample templates
(``tests/unit/test_chat_format.py``).
"""
from __future__ import annotations

import re

from hypnos.engines.chat_format.dialects import (HermesDialect, JsonDialect, Llama3Dialect,
                                                 MistralDialect, ToolDialect)
from hypnos.engines.chat_format.markup_dialects import (DIALECTS, GemmaDialect, GlmDialect,
                                                        HarmonyDialect, LfmDialect,
                                                        Qwen3CoderDialect, harmony_template)
from hypnos.engines.chat_format.prepare import ChatFormat, ThinkDialect


def detect(template: str, tool_format: str = "auto") -> ChatFormat:
    """The family's dialects from markers in its chat template. ``tool_format`` (the
    model's config) forces one by name, or "none" for a model without tool calling."""
    t = template or ""
    harmony = harmony_template(t)
    tools: ToolDialect
    if harmony:
        tools = HarmonyDialect()
    elif "<|tool_call>" in t:
        tools = GemmaDialect()
    elif "<start_function_call>" in t:
        tools = GemmaDialect("<start_function_call>", "<end_function_call>", "<escape>")
    elif "<arg_key>" in t and "<tool_call>" in t:
        tools = GlmDialect(newline="</arg_key>\n" in t)
    elif "<function=" in t and "<tool_call>" in t:
        tools = Qwen3CoderDialect()
    elif "<tool_call>" in t:
        tools = HermesDialect()
    elif "<|tool_call_start|>" in t or "List of tools: [" in t:
        tools = LfmDialect()           # LFM2.5's template lists tools with no markers
    elif "[TOOL_CALLS]" in t:
        tools = MistralDialect()
    elif "<|python_tag|>" in t or ("<|start_header_id|>" in t and "tools" in t):
        tools = Llama3Dialect()
    else:
        tools = JsonDialect()
    reads_tools = bool(re.search(r"\btools\b", t))
    if not reads_tools and tools.native:
        tools = JsonDialect()            # markers without a tools block: describe them
    if tool_format == "none":
        tools = None
    elif tool_format != "auto":
        tools = DIALECTS[tool_format]()
    think = None
    if harmony:         # the analysis channel; its <|end|> is unrendered: the next <|start|>
        think = ThinkDialect("<|channel|>analysis<|message|>", "<|start|>",
                             inject="<|end|><|start|>assistant")
    elif "<think>" in t:
        think = ThinkDialect("<think>", "</think>")
    elif "<|channel>" in t:
        think = ThinkDialect("<|channel>thought\n", "<channel|>")
    elif "[THINK]" in t:                 # Magistral, Ministral 3 reasoning
        think = ThinkDialect("[THINK]", "[/THINK]")
    reads_calls = "tool_calls" in t
    return ChatFormat(tools, think, reads_tools, reads_calls, harmony)
