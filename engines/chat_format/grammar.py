"""GBNF grammars for constrained answers: a forced tool call from the tool's JSON schema
(llama.cpp's own converter for the JSON dialects, rules built here for the XML and keyword
dialects), and ``response_format``.

A forced call's grammar is the whole answer: it starts after the dialect's forced opening and
ends where the call ends, so the model's only choice after it is its end token. Every value is
typed by its schema (strings, integers, numbers, booleans, enums, null, arrays and objects);
a string's ``maxLength`` bounds it, and numbers are written as JSON and Python both read
them (no leading zeros, at most 16 digits a part). The dialect parsers (``dialects``) read
every text these grammars admit (``tests/unit/test_tool_grammar.py`` checks both sides).

Pure string work; llama-cpp-python is imported only inside the functions that call its
converter, which only the llama engine calls.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable


def lit(text: str) -> str:
    """A GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tool_parameters(tools: list[dict], name: str | None):
    """(index, function, properties, required keys, optional keys) of each tool a forced
    call may use: the one named, or all of them."""
    for i, tool in enumerate(tools):
        fn = tool["function"]
        if name is not None and fn["name"] != name:
            continue
        schema = fn.get("parameters") or {}
        params = schema.get("properties") or {}
        # Both in the properties' order, as llama.cpp's converter orders them.
        required = [k for k in params if k in (schema.get("required") or ())]
        yield i, fn, params, required, [k for k in params if k not in required]


def schema_type(schema: dict) -> str | None:
    """The one JSON type a parameter's schema names (the first non-null one of a list)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind


# ------------------------------------------------------------------ value syntaxes

#: Numbers as both JSON and Python read them.
_NUMBER_RULES = ('int ::= "-"? ("0" | [1-9] [0-9]{0,15})\n'
                 'num ::= int ("." [0-9]{1,16})?\n')


def _chars(char_class: str, schema: dict) -> str:
    """``char_class`` repeated up to the schema's maxLength (unbounded without one)."""
    top = schema.get("maxLength")
    if isinstance(top, int) and top >= 0:
        return f"{char_class}{{0,{top}}}"
    return f"{char_class}*"


class ValueSyntax:
    """How one dialect writes a parameter's value; ``rule(schema)`` is its GBNF expression,
    ``rules()`` the shared rules it refers to."""
    true, false, null = "true", "false", "null"

    def string(self, schema: dict) -> str:
        raise NotImplementedError

    def literal(self, value) -> str:
        """An enum member as written."""
        return json.dumps(value, ensure_ascii=False)

    def any_value(self) -> str:
        """A value of no type, an array or an object (a shared rule's name)."""
        raise NotImplementedError

    def rules(self) -> str:
        return _NUMBER_RULES

    def rule(self, schema: dict) -> str:
        if "enum" in schema:
            return "(" + " | ".join(lit(self.literal(v)) for v in schema["enum"]) + ")"
        if "const" in schema:
            return lit(self.literal(schema["const"]))
        kind = schema_type(schema)
        if kind == "string":
            return self.string(schema)
        simple = {"integer": "int", "number": "num", "null": lit(self.null),
                  "boolean": f"({lit(self.true)} | {lit(self.false)})"}
        return simple.get(kind) or self.any_value()


class JsonText(ValueSyntax):
    """Qwen3-Coder: strings as bare text up to the closing tag, everything else as JSON."""

    def string(self, schema):
        return _chars("[^<]", schema)

    def literal(self, value):
        return value if isinstance(value, str) else json.dumps(value)

    def any_value(self):
        return "jvalue"

    def rules(self):
        return _NUMBER_RULES + (
            'jvalue ::= jobject | jarray | jstring | num | "true" | "false" | "null"\n'
            'jobject ::= "{" ( jstring ":" " "? jvalue ("," " "? jstring ":" " "? jvalue)* )? "}"\n'
            'jarray ::= "[" ( jvalue ("," " "? jvalue)* )? "]"\n'
            'jstring ::= "\\"" [^"\\\\<\\x00-\\x1f]* "\\""\n')


class PythonLiteral(ValueSyntax):
    """LFM: Python literals (``ast.literal_eval`` reads every one)."""
    true, false, null = "True", "False", "None"

    def string(self, schema):
        return f'"\\"" {_chars(_PY_CHAR, schema)} "\\""'

    def literal(self, value):
        return py_literal(value)

    def any_value(self):
        return "pyvalue"

    def rules(self):
        return _NUMBER_RULES + (
            'pyvalue ::= pystr | num | "True" | "False" | "None" | pylist | pydict\n'
            'pylist ::= "[" ( pyvalue (", " pyvalue)* )? "]"\n'
            'pydict ::= "{" ( pystr ": " pyvalue (", " pystr ": " pyvalue)* )? "}"\n'
            f'pystr ::= "\\"" {_PY_CHAR}* "\\""\n')


def py_literal(value) -> str:
    """``value`` as a Python literal in the form ``PythonLiteral`` admits: strings in double
    quotes (``repr`` when they hold a quote, a backslash or a line break), ", " separators."""
    if isinstance(value, str):
        return f'"{value}"' if not re.search(r'["\\\n\r\x00]', value) else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(str(k))}: {py_literal(v)}"
                               for k, v in value.items()) + "}"
    return repr(value)


#: A character a double-quoted Python literal holds as is (no escapes, no line breaks).
_PY_CHAR = '[^"\\\\\\n\\r\\x00]'


class GemmaQuoted(ValueSyntax):
    """Gemma: strings between ``quote`` marks, other values bare up to the next ``,``/``}``."""

    def __init__(self, quote: str):
        self.quote = quote

    def string(self, schema):
        return f"{lit(self.quote)} {_chars('[^<]', schema)} {lit(self.quote)}"

    def literal(self, value):
        return self.quote + value + self.quote if isinstance(value, str) else json.dumps(value)

    def any_value(self):
        return "bare"

    def rules(self):
        return _NUMBER_RULES + "bare ::= [^,{}<\\n \\t] [^,{}<\\n]*\n"


# ------------------------------------------------------------------ forced calls

def keyword_grammar(tools, name, *, open_args, close_args, sep, assign,
                    syntax: ValueSyntax) -> str:
    """GBNF for ``name<open>k1<assign>v1<sep>k2...<close>`` (LFM, Gemma): the required
    parameters first, in schema order, then each optional one or not, in schema order. With
    ``name`` the forced opening already holds ``name<open>``; without, the grammar starts with
    one of the tools' names."""
    def pair(key: str, schema: dict, lead: str) -> str:
        return f"{lit(lead + key + assign)} {syntax.rule(schema)}"

    rules, alts = [], []
    for i, fn, params, required, optional in tool_parameters(tools, name):
        parts = [] if name is not None else [lit(fn["name"] + open_args)]
        parts += [pair(k, params[k], sep if j else "") for j, k in enumerate(required)]
        if required:            # each optional one on its own after the required ones
            parts += [f"({pair(k, params[k], sep)})?" for k in optional]
        elif optional:          # none required: a chain, so no call starts with a separator
            chain = ""
            for j, key in reversed(list(enumerate(optional))):
                chain = f"({pair(key, params[key], sep if j else '')} {chain})?"
            parts.append(chain)
        rules.append(f"f{i} ::= " + (" ".join(parts) or '""'))
        alts.append(f"f{i}")
    return ("\n".join(rules) + f"\nroot ::= ({' | '.join(alts)}) {lit(close_args)}\n"
            + syntax.rules())


def tagged_grammar(tools, name, *, name_end: str, param_open: Callable[[str], str],
                   param_close: str, end: str, syntax: ValueSyntax) -> str:
    """GBNF for calls whose parameters are tagged blocks: Qwen3-Coder's
    ``<parameter=k>\\nvalue\\n</parameter>\\n`` after ``<function=name>\\n``, GLM's
    ``<arg_key>k</arg_key><arg_value>value</arg_value>`` after the name. ``name_end`` follows
    the name, ``param_open(key)`` and ``param_close`` wrap each value, ``end`` closes the call.
    Required parameters first, then each optional one or not, in schema order."""
    def block(key: str, schema: dict) -> str:
        return f"{lit(param_open(key))} {syntax.rule(schema)} {lit(param_close)}"

    rules, alts = [], []
    for i, fn, params, required, optional in tool_parameters(tools, name):
        parts = [] if name is not None else [lit(fn["name"] + name_end)]
        parts += [block(k, params[k]) for k in required]
        parts += [f"({block(k, params[k])})?" for k in optional]
        rules.append(f"f{i} ::= " + (" ".join(parts) or '""'))
        alts.append(f"f{i}")
    return ("\n".join(rules) + f"\nroot ::= ({' | '.join(alts)}) " + lit(end) + "\n"
            + syntax.rules())


def schema_call_grammar(tools: list[dict], name: str | None, args_key: str) -> str:
    """GBNF (rule ``call``) for ``{"name": <name>, "<args_key>": <arguments>}`` over the
    offered tools, from llama.cpp's own JSON-schema converter: whitespace where JSON allows
    it (bounded), the schema's properties only unless it sets ``additionalProperties``."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    options = []
    for tool in tools:
        fn = tool["function"]
        if name is not None and fn["name"] != name:
            continue
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        options.append({"type": "object",
                        "properties": {"name": {"const": fn["name"]}, args_key: params},
                        "required": ["name", args_key]})
    schema = options[0] if len(options) == 1 else {"oneOf": options}
    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema), prop_order=["name", args_key])
    except Exception:           # a schema feature the converter lacks: plain JSON arguments
        loose = [{"type": "object",
                  "properties": {"name": {"const": o["properties"]["name"]["const"]},
                                 args_key: {"type": "object"}},
                  "required": ["name", args_key]} for o in options]
        gbnf = json_schema_to_gbnf(json.dumps(loose[0] if len(loose) == 1 else {"oneOf": loose}),
                                   prop_order=["name", args_key])
    gbnf = re.sub(r"(?m)^space ::= .*$", lambda _m: _JSON_SPACE, gbnf)
    # Constants and enums: whitespace may follow them too (as in llama.cpp's C++ converter).
    gbnf = _LITERAL_RULE.sub(lambda m: f"{m[1]} ::= ({m[2]}) space", gbnf)
    return re.sub(r"(?m)^root ::=", "call ::=", gbnf).rstrip("\n") + "\n"


def schema_rules(schema: dict, ns: str) -> str:
    """GBNF rules (``<ns>-root`` and its helpers, every name prefixed ``<ns>-`` so several
    schemas share one grammar) for a JSON value following ``schema``, from llama.cpp's
    converter with the same whitespace and constant fixes as ``schema_call_grammar``; a
    schema the converter cannot express becomes any JSON object."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema))
    except Exception:
        gbnf = json_schema_to_gbnf(json.dumps({"type": "object"}))
    gbnf = re.sub(r"(?m)^space ::= .*$", lambda _m: _JSON_SPACE, gbnf)
    gbnf = _LITERAL_RULE.sub(lambda m: f"{m[1]} ::= ({m[2]}) space", gbnf)
    rules = [line.split(" ::= ", 1) for line in gbnf.splitlines() if " ::= " in line]
    names = {name for name, _ in rules}
    return "".join(f"{ns}-{name} ::= {_renamed(body, names, ns)}\n" for name, body in rules)


def _renamed(body: str, names: set[str], ns: str) -> str:
    """``body`` with every reference to a rule in ``names`` prefixed ``<ns>-`` (string
    literals and character classes copied as they are)."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c in "\"[":
            close = '"' if c == '"' else "]"
            j = i + 1
            while j < len(body) and body[j] != close:
                j += 2 if body[j] == "\\" else 1
            out.append(body[i:j + 1])
            i = j + 1
        elif c.isalnum() or c == "-":
            j = i
            while j < len(body) and (body[j].isalnum() or body[j] == "-"):
                j += 1
            word = body[i:j]
            out.append(f"{ns}-{word}" if word in names else word)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


_STRING = r'"(?:[^"\\]|\\.)*"'
_LITERAL_RULE = re.compile(rf"(?m)^(\S+) ::= ({_STRING}(?: \| {_STRING})*)$")

#: Whitespace between JSON tokens (the converter's own allows one space only): a space, or
#: line breaks and an indent, bounded so a call's length stays bounded.
_JSON_SPACE = 'space ::= ( " " | "\\n" "\\n"? [ \\t]{0,20} )?'


# ------------------------------------------------------------------ response_format

#: ``response_format`` types and what each becomes.
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")


def schema_grammar(schema: dict, convert: Callable[[str], str] | None = None) -> str:
    """GBNF for a JSON schema through llama.cpp's converter (``convert``, JSON schema text
    -> GBNF, defaults to it). Raises `InexpressibleSchema` naming what the converter cannot
    express (``not``, a regex with lookarounds, an unknown type...)."""
    if convert is None:
        from llama_cpp.llama_grammar import json_schema_to_gbnf as convert
    try:
        return convert(json.dumps(schema))
    except Exception as exc:        # the converter asserts on a feature it lacks
        raise InexpressibleSchema(str(exc) or type(exc).__name__) from None


class InexpressibleSchema(ValueError):
    """A JSON schema the grammar converter cannot express."""


def response_grammar(response_format: dict,
                     convert: Callable[[str], str] | None = None) -> tuple[str | None, str]:
    """(GBNF, response_format_status) for an OpenAI ``response_format``: ``json_object`` is
    any JSON object; ``json_schema`` follows the schema (`schema_grammar`), or any JSON
    object ("schema_downgraded", which the answer reports) when the converter cannot
    express the schema. ``convert`` as `schema_grammar`'s."""
    kind = response_format.get("type")
    if kind == "text":
        return None, "applied"
    if kind not in RESPONSE_FORMAT_TYPES:
        return None, "ignored_unknown_type"
    any_object = schema_grammar({"type": "object"}, convert)
    if kind == "json_object":
        return any_object, "applied"
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        return any_object, "schema_downgraded"
    try:
        return schema_grammar(schema, convert), "applied"
    except InexpressibleSchema:
        return any_object, "schema_downgraded"
