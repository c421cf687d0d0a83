"""The dialects whose calls are markup, not a JSON object: XML parameters (Qwen3-Coder),
Pythonic calls (LFM), Gemma's keyword calls and GLM's key/value tags; their arguments are
typed by the offered tools' schemas. ``DIALECTS`` names every dialect (the config's
``tool_format``).

Pure string work (no llama.cpp); see ``dialects`` for the table of call texts.
"""
from __future__ import annotations

import ast
import json
import re

from hypnos.engines.chat_format.dialects import (
    CallParseError, HermesDialect, JsonDialect, Llama3Dialect, MistralDialect, ToolDialect,
    _parameter_types,
)
from hypnos.engines.chat_format.grammar import (GemmaQuoted, JsonText, PythonLiteral,
                                                keyword_grammar, lit, py_literal, schema_rules,
                                                tagged_grammar)
from hypnos.engines.records import ToolCall


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
        return tagged_grammar(tools, name, name_end=">\n",
                              param_open=lambda k: f"<parameter={k}>\n",
                              param_close="\n</parameter>\n", end="</function>\n" + self.close,
                              syntax=JsonText())

    def render_call(self, call):
        params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n"
                         "</parameter>\n" for k, v in call["arguments"].items())
        return f"<tool_call>\n<function={call['name']}>\n{params}</function>\n</tool_call>"


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


class GlmDialect(ToolDialect):
    """GLM 4.5 to 4.7: ``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>
    </tool_call>``, strings bare and other values as JSON; 4.5 and 4.6 put a line break after
    the name and after each tag (``newline``), 4.7 none."""
    name = "glm"
    openers = ("<tool_call>",)
    close = "</tool_call>"
    _PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)

    def __init__(self, newline: bool = False):
        self.nl = "\n" if newline else ""

    def parse(self, block, tools=None):
        body = block[len(self.openers[0]):].removesuffix(self.close)
        fname = body.split("<arg_key>", 1)[0].strip()
        if not re.fullmatch(r"[\w.\-]+", fname):
            raise CallParseError("a call must start with the function's name")
        types = _parameter_types(tools)
        args = {}
        for key, raw in self._PAIR.findall(body):
            key = key.strip()
            if types.get((fname, key)) == "string":
                args[key] = raw
                continue
            try:
                args[key] = json.loads(raw)
            except json.JSONDecodeError:
                args[key] = raw
        return [ToolCall(fname, json.dumps(args, ensure_ascii=False))]

    def forced_prefix(self, name):
        return self.openers[0] + (name + self.nl if name else "")

    def grammar(self, tools, name):
        nl = self.nl
        return tagged_grammar(tools, name, name_end=nl,
                              param_open=lambda k: f"<arg_key>{k}</arg_key>{nl}<arg_value>",
                              param_close="</arg_value>" + nl, end=self.close,
                              syntax=JsonText())

    def render_call(self, call):
        nl = self.nl
        args = "".join(f"<arg_key>{k}</arg_key>{nl}<arg_value>"
                       f"{v if isinstance(v, str) else json.dumps(v)}</arg_value>{nl}"
                       for k, v in call["arguments"].items())
        return f"{self.openers[0]}{call['name']}{nl}{args}{self.close}"


# ------------------------------------------------------------------ harmony

MESSAGE = "<|message|>"
#: Where a harmony body ends (control tokens, when rendered).
ENDS = ("<|end|>", "<|return|>", "<|call|>")
_RECIPIENT = re.compile(r"to=functions\.([\w.\-]+)")


def harmony_template(template: str) -> bool:
    """The chat template writes harmony messages."""
    return "<|channel|>" in template and MESSAGE in template and "<|start|>" in template


class HarmonyDialect(ToolDialect):
    """OpenAI's harmony (gpt-oss): ``<|channel|>commentary to=functions.NAME <|constrain|>
    json<|message|>{args}<|call|>``; its answers are read by ``harmony.HarmonySplitter``."""
    name = "harmony"
    openers = ("<|channel|>commentary to=functions.",)
    close = ""              # <|call|> is an end-of-generation token: the model stops there
    _HEAD = " <|constrain|>json" + MESSAGE

    @staticmethod
    def reasoning_effort(budget: int | None) -> str:
        """The template's ``reasoning_effort`` for a thinking budget (gpt-oss always
        reasons; a budget of 0 still closes the analysis at once)."""
        if budget is None:
            return "medium"
        return "low" if budget <= 512 else "medium" if budget <= 2048 else "high"

    def parse(self, block, tools=None):
        at = block.find(MESSAGE)
        head, body = (block[:at], block[at + len(MESSAGE):]) if at >= 0 else (block, "")
        m = _RECIPIENT.search(head)
        if m is None:
            raise CallParseError("a call is addressed to=functions.NAME")
        for end in ENDS:
            body = body.split(end, 1)[0]
        try:
            # strict=False: control characters inside strings, as the JSON grammar admits.
            args = json.loads(body.strip() or "{}", strict=False)
        except json.JSONDecodeError as exc:
            raise CallParseError(f"arguments are not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise CallParseError("arguments must be a JSON object")
        return [ToolCall(m.group(1), json.dumps(args, ensure_ascii=False))]

    def forced_prefix(self, name):
        return self.openers[0] + (name + self._HEAD if name else "")

    def grammar(self, tools, name):
        rules, alts = [], []
        for i, tool in enumerate(tools):
            fn = tool["function"]
            if name is not None and fn["name"] != name:
                continue
            schema = fn.get("parameters") or {"type": "object", "properties": {}}
            rules.append(schema_rules(schema, f"t{i}"))
            alts.append(f"t{i}-root" if name is not None else
                        f"{lit(fn['name'] + self._HEAD)} t{i}-root")
        return f"root ::= {' | '.join(alts)}\n" + "".join(rules)

    def render_call(self, call):
        return self.forced_prefix(call["name"]) + json.dumps(call["arguments"],
                                                             ensure_ascii=False)


DIALECTS = {"hermes": HermesDialect, "json": JsonDialect, "qwen3_coder": Qwen3CoderDialect,
            "llama3": Llama3Dialect, "mistral": MistralDialect, "lfm": LfmDialect,
            "gemma": GemmaDialect, "glm": GlmDialect,
            "harmony": HarmonyDialect}
