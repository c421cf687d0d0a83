"""How each model family writes tool calls: the call text, its parser, the forced
opening and the grammar of a forced call (``tool_grammar``), and how a call in the history
is written back.

Dialects (the opening of a call as the model writes it):

=============  ==============================================================  ============
name           call text                                                       families
=============  ==============================================================  ============
hermes         ``<tool_call>{"name": .., "arguments": {..}}</tool_call>``       Qwen 2.5/3, GLM
qwen3_coder    ``<tool_call><function=f><parameter=k>v</parameter>...``         Qwen3-Coder
llama3         ``{"name": .., "parameters": {..}}`` (``<|python_tag|>``)        Llama 3.x
mistral        ``[TOOL_CALLS][{"name": .., "arguments": {..}}]`` or ``f[ARGS]{}``  Mistral
lfm            ``<|tool_call_start|>[f(k="v")]<|tool_call_end|>``               LFM2/LFM3
gemma          ``<|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|>``                Gemma 4
json           hermes tags, the tools described in the system message by Hypnos  any other
=============  ==============================================================  ============

Pure string work (no llama.cpp), unit-tested on sample outputs
(``tests/test_chat_format.py``) and against the grammars (``tests/test_tool_grammar.py``).
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from hypnos.engines.tool_grammar import (GemmaQuoted, JsonText, PythonLiteral, keyword_grammar,
                                         lit, py_literal, schema_call_grammar, schema_type,
                                         tagged_grammar)


@dataclass
class ToolCall:
    name: str
    arguments: str                      # a JSON object serialised as a string


@dataclass
class ToolCallError:
    """A call the model started but that did not parse (Pantheon's ``tool_call_error``)."""
    code: str                           # unparseable_call | unknown_function
    message: str
    function: str | None = None

    def to_wire(self) -> dict:
        out = {"code": self.code, "message": self.message}
        if self.function:
            out["function"] = self.function
        return out


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


class Qwen3CoderDialect(ToolDialect):
    name = "qwen3_coder"
    openers = ("<tool_call>",)
    close = "</tool_call>"
    _FUNC = re.compile(r"<function=([^>\s]+)>(.*?)</function>", re.S)
    _PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)

    def parse(self, block: str, tools=None) -> list[ToolCall]:
        types = _parameter_types(tools)
        calls = []
        for fname, body in self._FUNC.findall(block):
            args = {}
            for key, raw in self._PARAM.findall(body):
                if types.get((fname, key)) == "string":
                    args[key] = raw                  # this dialect writes strings bare
                    continue
                try:
                    args[key] = json.loads(raw)
                except json.JSONDecodeError:
                    args[key] = raw
            calls.append(ToolCall(fname, json.dumps(args, ensure_ascii=False)))
        if not calls:
            raise CallParseError("no <function=...> block in the tool call")
        return calls

    def forced_prefix(self, name):
        return self.openers[0] + "\n" + (f"<function={name}>\n" if name else "<function=")

    def grammar(self, tools, name):
        return tagged_grammar(tools, name, close=self.close, syntax=JsonText())

    def render_call(self, call):
        params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n"
                         "</parameter>\n" for k, v in call["arguments"].items())
        return f"<tool_call>\n<function={call['name']}>\n{params}</function>\n</tool_call>"


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


class LfmDialect(ToolDialect):
    """Pythonic calls: ``[get_weather(city="Paris"), now()]``."""
    name = "lfm"
    openers = ("<|tool_call_start|>",)
    close = "<|tool_call_end|>"

    def parse(self, block, tools=None):
        body = block[len(self.openers[0]):]
        body = body.removesuffix(self.close).strip()
        try:
            tree = ast.parse(body, mode="eval").body
        except SyntaxError as exc:
            raise CallParseError(f"not a Python call list: {exc.msg}") from None
        items = tree.elts if isinstance(tree, ast.List) else [tree]
        calls = []
        for item in items:
            if not isinstance(item, ast.Call) or not isinstance(item.func, ast.Name):
                raise CallParseError("each call must be name(key=value, ...)")
            try:
                args = {kw.arg: ast.literal_eval(kw.value) for kw in item.keywords}
            except ValueError:
                raise CallParseError("call arguments must be literals") from None
            calls.append(ToolCall(item.func.id, json.dumps(args, ensure_ascii=False)))
        return calls

    def forced_prefix(self, name):
        return self.openers[0] + "[" + (f"{name}(" if name else "")

    def grammar(self, tools, name):
        # key=value pairs in Python syntax; the answer ends after "])" (the model's end token
        # then closes it; the splitter reads a call cut at the end of the answer).
        return keyword_grammar(tools, name, open_args="(", close_args=")]" + self.close,
                               sep=", ", assign="=", syntax=PythonLiteral())

    def render_call(self, call):
        args = ", ".join(f"{k}={py_literal(v)}" for k, v in call["arguments"].items())
        return f"{self.openers[0]}[{call['name']}({args})]{self.close}"


class GemmaDialect(ToolDialect):
    """``call:name{key:<q>text<q>,n:5}``; Gemma 4 quotes strings with ``<|"|>``,
    FunctionGemma with ``<escape>``."""
    name = "gemma"

    def __init__(self, opener="<|tool_call>", close="<tool_call|>", quote='<|"|>'):
        self.openers = (opener,)
        self.close = close
        self.quote = quote

    def parse(self, block, tools=None):
        body = block[len(self.openers[0]):].removesuffix(self.close).strip()
        m = re.fullmatch(r"call:([\w.\-]+)\{(.*)\}", body, re.S)
        if not m:
            raise CallParseError("a call must be call:name{...}")
        return [ToolCall(m.group(1), json.dumps(self._object(m.group(2)), ensure_ascii=False))]

    def _object(self, text: str) -> dict:
        # Strings are quoted with self.quote; other values are JSON literals.
        out, i, q = {}, 0, self.quote
        while i < len(text):
            colon = text.find(":", i)
            if colon < 0:
                raise CallParseError("expected key:value")
            key = text[i:colon].strip().strip(",").strip()
            j = colon + 1
            if text.startswith(q, j):
                end = text.find(q, j + len(q))
                if end < 0:
                    raise CallParseError("unterminated string")
                out[key] = text[j + len(q):end]
                i = end + len(q)
            else:
                end = text.find(",", j)
                end = len(text) if end < 0 else end
                raw = text[j:end].strip()
                try:
                    out[key] = json.loads(raw)
                except json.JSONDecodeError:
                    out[key] = raw
                i = end
            while i < len(text) and text[i] in ", \n":
                i += 1
        return out

    def forced_prefix(self, name):
        return self.openers[0] + "call:" + (f"{name}{{" if name else "")

    def grammar(self, tools, name):
        return keyword_grammar(tools, name, open_args="{", close_args="}" + self.close,
                               sep=",", assign=":", syntax=GemmaQuoted(self.quote))

    def render_call(self, call):
        q = self.quote
        args = ",".join(f"{k}:{q}{v}{q}" if isinstance(v, str) else f"{k}:{json.dumps(v)}"
                        for k, v in call["arguments"].items())
        return f"{self.openers[0]}call:{call['name']}{{{args}}}{self.close}"


DIALECTS = {"hermes": HermesDialect, "json": JsonDialect, "qwen3_coder": Qwen3CoderDialect,
            "llama3": Llama3Dialect, "mistral": MistralDialect, "lfm": LfmDialect,
            "gemma": GemmaDialect}
