"""GBNF grammars for constrained answers: a forced tool call's arguments, from the tool's
JSON schema (llama.cpp's own converter for JSON dialects, hand-built rules for the XML and
keyword dialects), and ``response_format``. Pure string work; llama-cpp-python is imported
only where its converter is used."""
from __future__ import annotations

import json
import re


def lit(text: str) -> str:
    """A GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tool_parameters(tools: list[dict], name: str | None):
    """(index, function, properties, required keys in schema order, optional keys) of each
    tool a forced call may use: the one named, or all of them."""
    for i, tool in enumerate(tools):
        fn = tool["function"]
        if name is not None and fn["name"] != name:
            continue
        schema = fn.get("parameters") or {}
        params = schema.get("properties") or {}
        required = [k for k in schema.get("required", []) if k in params]
        yield i, fn, params, required, [k for k in params if k not in required]


def keyword_grammar(tools, name, *, open_args, close_args, sep, assign, value) -> str:
    """GBNF for ``name<open>k1<assign>v1<sep>k2...<close>`` dialects (LFM, Gemma): the
    required parameters first, in schema order, then each optional one or not; a value's
    shape comes from its schema through ``value(schema)``. With ``name`` the prefix already
    holds ``name<open>``; without, the grammar starts with one of the tools' names."""
    rules, alts = [], []
    for i, fn, params, required, optional in tool_parameters(tools, name):
        parts = [] if name is not None else [lit(fn["name"] + open_args)]
        for j, key in enumerate(required):
            lead = sep if j else ""
            parts.append(f"{lit(lead + key + assign)} {value(params[key])}")
        if required:            # each optional one on its own after the required ones
            parts += [f"({lit(sep + key + assign)} {value(params[key])})?" for key in optional]
        elif optional:          # none required: a chain, so no call starts with a separator
            chain = ""
            for j, key in reversed(list(enumerate(optional))):
                chain = f"({lit((sep if j else '') + key + assign)} {value(params[key])} {chain})?"
            parts.append(chain)
        rules.append(f"f{i} ::= " + (" ".join(parts) or '""'))
        alts.append(f"f{i}")
    return ("\n".join(rules) + f"\nroot ::= ({' | '.join(alts)}) {lit(close_args)}\n"
            + _VALUE_RULES)


_VALUE_RULES = ('digits ::= [0-9] [0-9]*\n'
                'pystr ::= "\\"" [^"\\\\\\n]* "\\""\n'
                'loose ::= [^,)}<\\n] [^,)}<\\n]*\n')


def _typed_value(schema: dict, string: str, literal, booleans: str) -> str:
    """The GBNF of one parameter's value by its schema: ``string`` for strings, ``literal``
    turns an enum member into its written form, ``booleans`` as the dialect spells them."""
    kind = schema.get("type")
    if "enum" in schema:
        return "(" + " | ".join(lit(literal(v)) for v in schema["enum"]) + ")"
    return {"string": string, "integer": '"-"? digits',
            "number": '"-"? digits ("." digits)?', "boolean": booleans}.get(kind, "loose")


def python_value(schema: dict) -> str:
    return _typed_value(schema, "pystr", repr, '("True" | "False")')


def quoted_value(schema: dict, quote: str) -> str:
    return _typed_value(schema, f"{lit(quote)} [^<]* {lit(quote)}",
                        lambda v: quote + v + quote if isinstance(v, str) else json.dumps(v),
                        '("true" | "false")')


def schema_call_grammar(tools: list[dict], name: str | None, args_key: str) -> str:
    """GBNF (rule ``call``) for ``{"name": <name>, "<args_key>": <arguments>}`` over the
    offered tools, from llama.cpp's own JSON-schema converter."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    options = []
    for tool in tools:
        fn = tool["function"]
        if name is not None and fn["name"] != name:
            continue
        params = fn.get("parameters") or {"type": "object"}
        options.append({"type": "object",
                        "properties": {"name": {"const": fn["name"]}, args_key: params},
                        "required": ["name", args_key]})
    schema = options[0] if len(options) == 1 else {"oneOf": options}
    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema), prop_order=["name", args_key])
    except Exception:           # a schema feature the converter lacks: plain JSON arguments
        loose = [{"type": "object", "properties": {"name": {"const": o["properties"]["name"]["const"]},
                                                   args_key: {"type": "object"}},
                  "required": ["name", args_key]} for o in options]
        gbnf = json_schema_to_gbnf(json.dumps(loose[0] if len(loose) == 1 else {"oneOf": loose}),
                                   prop_order=["name", args_key])
    return re.sub(r"(?m)^root ::=", "call ::=", gbnf).rstrip("\n") + "\n"


# ------------------------------------------------------------------ response_format

def response_grammar(response_format: dict) -> tuple[str | None, str]:
    """(GBNF, response_format_status) for an OpenAI ``response_format``: ``json_object`` is
    any JSON object; ``json_schema`` follows the schema through llama.cpp's converter, or
    any JSON object ("schema_downgraded") when the converter cannot express the schema."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    kind = response_format.get("type")
    if kind == "text":
        return None, "applied"
    any_object = json_schema_to_gbnf(json.dumps({"type": "object"}))
    if kind == "json_object":
        return any_object, "applied"
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            return any_object, "schema_downgraded"
        try:
            return json_schema_to_gbnf(json.dumps(schema)), "applied"
        except Exception:               # a schema feature the converter lacks
            return any_object, "schema_downgraded"
    return None, "ignored_unknown_type"
