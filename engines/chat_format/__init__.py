"""Chat formats: how a model family writes tool calls and thinking, read off its chat template,
and reading its answers as they stream. Pure string work: nothing here imports llama.cpp at
module level (``grammar`` imports llama-cpp-python's JSON-schema converter inside the one
function that uses it).

- ``dialects``, ``markup_dialects``: each family's tool-call text, parser, forced opening
  and grammar; ``DIALECTS`` by name.
- ``detect``: the family's dialects from markers in its chat template.
- ``prepare``: ``ChatFormat``, ``ThinkDialect``; a request turned into what the engine renders.
- ``grammar``: GBNF builders (forced calls from a tool's schema, ``response_format``).
- ``gbnf``: a GBNF grammar walked as llama.cpp walks it, with the shortest end of any state;
  ``closing``: ``CallCloser``, which keeps a forced call closable within ``max_tokens``.
- ``stream``: ``StopMatcher`` and ``AnswerSplitter``, the answer read piece by piece.
- ``loose_calls``: calls a trained model writes as bare or fenced JSON outside its dialect
  (read by ``AnswerSplitter`` when tools are active), and the JSON-schema subset they are
  checked against.

The names below are the package's public API, re-exported for callers outside the engines.
"""
from hypnos.engines.chat_format.detect import detect
from hypnos.engines.chat_format.dialects import (CallParseError, HermesDialect, JsonDialect,
                                                 Llama3Dialect, MistralDialect, ToolDialect)
from hypnos.engines.chat_format.markup_dialects import (DIALECTS, GemmaDialect, GlmDialect,
                                                        LfmDialect, Qwen3CoderDialect)
from hypnos.engines.chat_format.prepare import (EFFORT_BUDGETS, MEDIA_PARTS, TOOL_FORMATS,
                                                ChatFormat, Prepared, ThinkDialect, prepare,
                                                think_budget)
from hypnos.engines.chat_format.stream import AnswerSplitter, Piece, StopMatcher
from hypnos.engines.records import ToolCall, ToolCallError

__all__ = [
    "AnswerSplitter", "CallParseError", "ChatFormat", "DIALECTS", "EFFORT_BUDGETS",
    "GemmaDialect", "GlmDialect", "HermesDialect", "JsonDialect", "Llama3Dialect", "LfmDialect",
    "MEDIA_PARTS", "MistralDialect", "Piece", "Prepared", "Qwen3CoderDialect", "StopMatcher",
    "TOOL_FORMATS", "ThinkDialect", "ToolCall", "ToolCallError", "ToolDialect", "detect",
    "prepare", "think_budget",
]
