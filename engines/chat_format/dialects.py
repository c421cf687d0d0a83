"""How each model family writes tool calls (the JSON-bodied dialects here, the markup ones
in ``markup_dialects``): the call text, its parser, the forced
opening and the grammar of a forced call (``grammar``), and how a call in the history
is written back.

Dialects (the opening of a call as the model writes it):

=============  ==============================================================  ============
name           call text                                                       families
=============  ==============================================================  ============
hermes         ``<tool_call>{"name": .., "arguments": {..}}</tool_call>``       Qwen 2.5/3, GLM-4
qwen3_coder    ``<tool_call><function=f><parameter=k>v</parameter>...``         Qwen3-Coder/3.5
glm            ``<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value>...``  GLM-4.5 to 4.7
llama3         ``{"name": .., "parameters": {..}}`` (``<|python_tag|>``)        Llama 3.x
mistral        ``[TOOL_CALLS][{"name": .., "arguments": {..}}]`` or ``f[ARGS]{}``  Mistral
lfm            ``<|tool_call_start|>[f(k="v")]<|tool_call_end|>``               LFM2/2.5/3
gemma          ``<|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|>``                Gemma 4
harmony        ``<|channel|>commentary to=functions.f ...<|message|>{..}``      gpt-oss
json           hermes tags, the tools described in the system message by Hypnos  any other
=============  ==============================================================  ============

Pure string work (no llama.cpp), unit-tested on sample outputs
(``tests/unit/test_chat_format.py``) and against the grammars (``tests/unit/test_tool_grammar.py``).
"""
from __future__ import annotations

import json

from hypnos.engines.chat_format.grammar import lit, schema_call_grammar, schema_type
from hypnos.engines.records import ToolCall


class CallParseError(ValueError):
    pass


class ToolDialect:
    """Base: a call starts with one of ``openers`` and ends with ``close`` (or at the end of
    the answer when ``close`` is empty)."""
    name = "base"
    openers: tuple[str, ...] = ()
    close = ""
    #: The template renders ``tools`` itself (else Hypnos describes them in the system message).
    native = True

    def parse(self, block: str, tools: list[dict] | None = None) -> list[ToolCall]:
        """Calls in ``block`` (opener to close, both included; for a forced call, the forced
        opening and everything generated after it). ``tools``, the offered tools, types the
        values of dialects that write them as text. Raises CallParseError."""
        raise NotImplementedError

    def forced_prefix(self, name: str | None) -> str:
        """Text appended after the generation prompt that starts a call (to ``name``)."""
        return self.openers[0]

    def grammar(self, tools: list[dict], name: str | None) -> str:
        """GBNF for everything after ``forced_prefix``: one call to ``name`` (any tool when
        None) whose arguments follow the tool's JSON schema, and nothing after it but what
        the dialect closes a call with. ``parse(forced_prefix + text)`` reads every text it
        admits."""
        raise NotImplementedError

    def render_call(self, call: dict) -> str:
        """An assistant message's call as this dialect writes it (for templates that do not
        render ``tool_calls``)."""
        return self.openers[0] + json.dumps(
            {"name": call["name"], "arguments": call["arguments"]}, ensure_ascii=False) + self.close


def _arguments_object(raw) -> dict:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CallParseError(f"arguments are not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise CallParseError("arguments must be a JSON object")
    return raw


def _json_call(obj, args_key: str = "arguments") -> ToolCall:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise CallParseError("a call must be an object with a string 'name'")
    args = obj.get(args_key, obj.get("arguments", obj.get("parameters", {})))
    return ToolCall(obj["name"], json.dumps(_arguments_object(args), ensure_ascii=False))


def _parameter_types(tools: list[dict] | None) -> dict[tuple[str, str], str | None]:
    """(function, parameter) -> the JSON type its schema names ("string" for an enum of
    strings), for the offered ``tools``."""
    out = {}
    for tool in tools or ():
        fn = tool.get("function") or {}
        for key, schema in ((fn.get("parameters") or {}).get("properties") or {}).items():
            kind = schema_type(schema) if isinstance(schema, dict) else None
            if isinstance(schema, dict) and "enum" in schema and all(
                    isinstance(v, str) for v in schema["enum"]):
                kind = "string"
            out[(fn.get("name"), key)] = kind
    return out


def _json_values(text: str) -> list:
    """Every JSON value in ``text``, one after another (separated by whitespace, commas or
    semicolons)."""
    # strict=False: control characters inside strings, as llama.cpp's JSON grammar admits.
    decoder = json.JSONDecoder(strict=False)
    values, i = [], 0
    while True:
        while i < len(text) and text[i] in " \t\r\n,;":
            i += 1
        if i >= len(text):
            return values
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise CallParseError(f"not JSON: {exc}") from None
        values.append(value)


class HermesDialect(ToolDialect):
    name = "hermes"
    openers = ("<tool_call>",)
    close = "</tool_call>"

    def parse(self, block: str, tools=None) -> list[ToolCall]:
        body = block[len(self.openers[0]):]
        if body.endswith(self.close):
            body = body[:-len(self.close)]
        values = _json_values(body.strip())
        if not values:
            raise CallParseError("empty tool call")
        return [_json_call(v) for v in values]

    def forced_prefix(self, name: str | None) -> str:
        return self.openers[0] + "\n"

    def grammar(self, tools, name):
        return schema_call_grammar(tools, name, "arguments") + \
            f"root ::= call {lit(chr(10) + self.close)}\n"

    def render_call(self, call: dict) -> str:
        return (f"{self.openers[0]}\n" + json.dumps(
            {"name": call["name"], "arguments": call["arguments"]}, ensure_ascii=False)
            + f"\n{self.close}")


class JsonDialect(HermesDialect):
    """For templates with no tool format: Hermes tags, tools described by Hypnos."""
    name = "json"
    native = False

    @staticmethod
    def instructions(tools: list[dict]) -> str:
        specs = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
        return ("You can call the following tools. To call one, answer with\n<tool_call>\n"
                '{"name": "<tool name>", "arguments": {<arguments as JSON>}}\n</tool_call>\n'
                f"Tools:\n{specs}")


class Llama3Dialect(ToolDialect):
    name = "llama3"
    openers = ("<|python_tag|>", '{"name"', '{ "name"')
    close = ""

    def parse(self, block, tools=None):
        body = block.removeprefix("<|python_tag|>").strip()
        values = _json_values(body)
        if not values:
            raise CallParseError("empty tool call")
        return [_json_call(v, "parameters") for v in values]

    def forced_prefix(self, name):
        return ""

    def grammar(self, tools, name):
        return schema_call_grammar(tools, name, "parameters") + "root ::= call\n"

    def render_call(self, call):
        return json.dumps({"name": call["name"], "parameters": call["arguments"]},
                          ensure_ascii=False)


class MistralDialect(ToolDialect):
    name = "mistral"
    openers = ("[TOOL_CALLS]",)
    close = ""

    def parse(self, block, tools=None):
        body = block[len(self.openers[0]):].strip()
        if "[ARGS]" in body:            # v11+: name[ARGS]{...} per call
            calls = []
            for part in body.split("[TOOL_CALLS]"):
                fname, _, args = part.partition("[ARGS]")
                values = _json_values(args)
                if not fname.strip() or len(values) != 1:
                    raise CallParseError("a call must be name[ARGS]{...}")
                calls.append(ToolCall(fname.strip(), json.dumps(_arguments_object(values[0]),
                                                                 ensure_ascii=False)))
            return calls
        values = _json_values(body)
        if len(values) == 1 and isinstance(values[0], list):
            values = values[0]
        if not values:
            raise CallParseError("empty tool call")
        return [_json_call(v) for v in values]

    def grammar(self, tools, name):
        return schema_call_grammar(tools, name, "arguments") + 'root ::= "[" call "]"\n'

    def render_call(self, call):
        return "[TOOL_CALLS]" + json.dumps([{"name": call["name"], "arguments": call["arguments"]}],
                                           ensure_ascii=False)
