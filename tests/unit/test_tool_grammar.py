"""A forced call's grammar and its dialect's parser agree, for every dialect: each text the
grammar admits (spacing, line breaks, every JSON value type, optional parameters present or
not, a named tool or any of them) parses to the call it spells, and the grammar refuses what
is not one call (a trailing sentence, a second call, an unknown key, a wrong type, a missing
required key, an over-long string).

Model-free and machine-independent: the grammar side runs llama.cpp's own grammar engine on
the text (``gbnf_check``), the parser side is pure Python. Loosen a grammar and the refusals
fail; tighten a parser and the parses fail.
"""
import json
import random

import llama_cpp  # noqa: F401 - a default extra, which gbnf_check loads: missing, this fails
import pytest

from gbnf_check import accepts, parses
from hypnos.engines.chat_format import DIALECTS, GemmaDialect, GlmDialect
from hypnos.engines.chat_format.stream import AnswerSplitter
from hypnos.engines.chat_format.grammar import py_literal, response_grammar

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
PLAN = {"type": "function", "function": {
    "name": "plan", "parameters": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 24}, "count": {"type": "integer"},
        "ratio": {"type": "number"}, "urgent": {"type": "boolean"},
        "level": {"enum": ["low", "high"]}, "nothing": {"type": "null"},
        "tags": {"type": "array", "items": {"type": "string"}}, "meta": {"type": "object"}},
        "required": ["count", "title"]}}}
NOW = {"type": "function", "function": {"name": "now",
                                        "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, PLAN, NOW]
ORDER = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

CALLS = [
    ("get_weather", {"city": "Paris"}),
    ("get_weather", {"city": "São Paulo, BR", "days": 3, "unit": "fahrenheit"}),
    ("get_weather", {"city": "", "unit": "celsius"}),
    ("plan", {"title": "x", "count": 0}),
    ("plan", {"title": "Tea at 5 (or 6)", "count": -12, "ratio": 0.25, "urgent": True,
              "level": "high", "nothing": None, "tags": ["a", "b c"], "meta": {"k": 1}}),
    ("plan", {"title": "t", "count": 7, "urgent": False, "tags": []}),
    ("now", {}),
]

GEMMA_ESCAPE = GemmaDialect("<start_function_call>", "<end_function_call>", "<escape>")
CASES = {**{name: cls() for name, cls in DIALECTS.items()}, "functiongemma": GEMMA_ESCAPE,
         "glm_newline": GlmDialect(newline=True)}


def ordered(name: str, args: dict) -> dict:
    """``args`` in the grammar's order: required keys, then optional ones, each group in the
    order of the schema's properties."""
    schema = ORDER[name]
    keys = list(schema["properties"])
    req = [k for k in keys if k in schema.get("required", [])]
    return {k: args[k] for k in req + [k for k in keys if k not in req] if k in args}


def json_text(obj, style: str) -> str:
    return {"compact": lambda: json.dumps(obj, separators=(",", ":"), ensure_ascii=False),
            "spaced": lambda: json.dumps(obj, ensure_ascii=False),
            "indent": lambda: json.dumps(obj, indent=2, ensure_ascii=False),
            "tabs": lambda: json.dumps(obj, indent="\t", ensure_ascii=False)}[style]()


def render(case: str, name: str, args: dict, named: bool, style: str) -> str:
    """What the model writes after the forced opening, in the form the grammar admits."""
    d = CASES[case]
    args = ordered(name, args)
    if case in ("hermes", "json"):
        return json_text({"name": name, "arguments": args}, style) + "\n</tool_call>"
    if case == "llama3":
        return json_text({"name": name, "parameters": args}, style)
    if case == "mistral":
        return "[" + json_text({"name": name, "arguments": args}, style) + "]"
    if case == "qwen3_coder":
        sep = (",", ":") if style == "compact" else (", ", ": ")
        blocks = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, separators=sep)}"
            "\n</parameter>\n" for k, v in args.items())
        return ("" if named else f"{name}>\n") + blocks + "</function>\n</tool_call>"
    if case == "lfm":
        body = ", ".join(f"{k}={py_literal(v)}" for k, v in args.items())
        return ("" if named else f"{name}(") + body + ")]<|tool_call_end|>"
    if case == "harmony":
        return ("" if named else name + " <|constrain|>json<|message|>") + json_text(args, style)
    if case.startswith("glm"):
        sep = (",", ":") if style == "compact" else (", ", ": ")
        return _glm(d, name, {k: v if isinstance(v, str) else json.dumps(v, separators=sep)
                              for k, v in args.items()}, named)
    q = d.quote
    body = ",".join(f"{k}:{q}{v}{q}" if isinstance(v, str) else
                    f"{k}:{json.dumps(v, separators=(',', ':'))}" for k, v in args.items())
    return ("" if named else f"{name}{{") + body + "}" + d.close


def expressible(case: str, args: dict) -> bool:
    """Gemma's bare values end at a comma or a brace: no objects, no multi-item arrays."""
    if case not in ("gemma", "functiongemma"):
        return True
    return all(not isinstance(v, dict) and not (isinstance(v, list) and len(v) > 1)
               for v in args.values())


STYLES = ["compact", "spaced", "indent", "tabs"]
FORMS = [(case, name, args, named, style)
         for case in CASES for name, args in CALLS if expressible(case, args)
         for named in (True, False)
         for style in (STYLES if case in ("hermes", "json", "llama3", "mistral", "harmony") else
                       ["compact", "spaced"] if case in ("qwen3_coder", "glm", "glm_newline")
                       else ["compact"])]


def forced(case: str, name: str, named: bool) -> tuple[str, str]:
    """(forced opening, grammar) for a call to ``name`` (``named``) or to any tool."""
    d = CASES[case]
    target = name if named else None
    return d.forced_prefix(target), d.grammar(TOOLS, target)


def form_id(form) -> str:
    case, name, args, named, style = form
    return f"{case}-{name}{len(args)}-{'named' if named else 'required'}-{style}"


@pytest.mark.parametrize("form", FORMS, ids=form_id)
def test_every_admitted_form_parses_to_its_call(form):
    case, name, args, named, style = form
    prefix, grammar = forced(case, name, named)
    text = render(case, name, args, named, style)
    assert accepts(grammar, text), f"the grammar refuses {text!r}"
    calls = CASES[case].parse(prefix + text, TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(name, args)]


@pytest.mark.parametrize("form", [f for f in FORMS if f[4] in ("compact", "indent")],
                         ids=form_id)
def test_the_forced_splitter_reads_any_chunking_as_the_call(form):
    """Everything generated under the grammar is the call: no opener is searched for, so a
    space after ``{`` (which the literal opener ``{"name"`` would miss) changes nothing."""
    case, name, args, named, style = form
    prefix, _ = forced(case, name, named)
    text = render(case, name, args, named, style)
    rng = random.Random(len(text))
    cuts = sorted(rng.sample(range(1, len(text)), min(6, len(text) - 1)))
    sp = AnswerSplitter(tools=CASES[case], prefix=prefix, known=frozenset(ORDER),
                        offered=TOOLS, forced=True)
    bounds = zip([0, *cuts], [*cuts, len(text)], strict=True)
    pieces = [p for a, b in bounds for p in sp.feed(text[a:b])]
    pieces += sp.finish()
    assert [(p.kind, p.call.name) for p in pieces] == [("call", name)]
    assert sp.errors == [] and json.loads(sp.calls[0].arguments) == args


@pytest.mark.parametrize("case", CASES)
def test_a_canonical_rendering_is_admitted(case):
    d = CASES[case]
    call = {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}
    text = d.render_call(call)
    prefix = d.forced_prefix("get_weather")
    assert text.startswith(prefix)
    assert accepts(d.grammar(TOOLS, "get_weather"), text[len(prefix):])


def _refusals(case: str) -> list[tuple[str, str, bool, str]]:
    """(why, tool, named, text) that no forced call may be."""
    ok = render(case, "get_weather", {"city": "Paris"}, True, "compact")
    out = [("trailing sentence", "get_weather", True, ok + " Thanks!"),
           ("trailing line", "get_weather", True, ok + "\nDone."),
           ("cut short", "get_weather", True, ok[:-3])]
    second = render(case, "now", {}, False, "compact")
    out.append(("a second call", "get_weather", False,
                render(case, "get_weather", {"city": "Paris"}, False, "compact") +
                CASES[case].forced_prefix(None) + second))
    for why, args in (("unknown key", {"city": "Paris", "country": "FR"}),
                      ("string for an integer", {"city": "Paris", "days": "3"}),
                      ("value outside the enum", {"city": "Paris", "unit": "kelvin"}),
                      ("missing required key", {"days": 3})):
        out.append((why, "get_weather", True, _raw(case, "get_weather", args)))
    out.append(("over maxLength", "plan", True,
                _raw(case, "plan", {"count": 1, "title": "x" * 25})))
    out.append(("leading zero", "plan", True, _raw(case, "plan", {"count": "007", "title": "x"},
                                                   bare=("count",))))
    out.append(("a tool not offered", "get_weather", False,
                _raw(case, "rm_rf", {}, named=False)))
    return out


def _glm(d, name: str, texts: dict, named: bool) -> str:
    """GLM's key/value tags over values already written as text."""
    pairs = "".join(f"<arg_key>{k}</arg_key>{d.nl}<arg_value>{v}</arg_value>{d.nl}"
                    for k, v in texts.items())
    return ("" if named else name + d.nl) + pairs + "</tool_call>"


def _raw(case, name, args, named=True, bare=()):
    """``render`` without the schema's ordering or types (for texts the grammar must refuse);
    keys in ``bare`` are written unquoted whatever their Python type."""
    d = CASES[case]
    order = list(args)
    if case in ("hermes", "json", "llama3", "mistral"):
        key = "parameters" if case == "llama3" else "arguments"
        inner = ",".join(f'"{k}":{args[k] if k in bare else json.dumps(args[k])}' for k in order)
        obj = f'{{"name":"{name}","{key}":{{{inner}}}}}'
        return {"llama3": obj, "mistral": f"[{obj}]"}.get(case, obj + "\n</tool_call>")
    if case == "qwen3_coder":
        blocks = "".join(f"<parameter={k}>\n{args[k]}\n</parameter>\n" for k in order)
        return ("" if named else f"{name}>\n") + blocks + "</function>\n</tool_call>"
    if case == "lfm":
        body = ", ".join(f"{k}={args[k] if k in bare else py_literal(args[k])}" for k in order)
        return ("" if named else f"{name}(") + body + ")]<|tool_call_end|>"
    if case.startswith("glm"):
        return _glm(d, name, {k: args[k] for k in order}, named)
    if case == "harmony":
        inner = ",".join(f'"{k}":{args[k] if k in bare else json.dumps(args[k])}' for k in order)
        return ("" if named else name + " <|constrain|>json<|message|>") + "{" + inner + "}"
    q = d.quote
    body = ",".join(f"{k}:{args[k] if k in bare else q + str(args[k]) + q}"
                    if isinstance(args[k], str) else f"{k}:{json.dumps(args[k])}"
                    for k in order)
    return ("" if named else f"{name}{{") + body + "}" + d.close


@pytest.mark.parametrize("case", CASES)
def test_the_grammar_refuses_what_is_not_one_call(case):
    admitted = []
    for why, name, named, text in _refusals(case):
        if why == "string for an integer" and case in ("qwen3_coder", "glm", "glm_newline"):
            continue                    # these write every value bare: "3" is 3
        _, grammar = forced(case, name, named)
        if accepts(grammar, text):
            admitted.append((why, text))
    assert admitted == []


@pytest.mark.parametrize("case", CASES)
def test_every_grammar_parses_in_llama_cpp(case):
    for named in (True, False):
        assert parses(forced(case, "get_weather", named)[1])


def test_unknown_keys_are_refused_when_the_schema_does_not_allow_them():
    """additionalProperties absent or false: only the schema's properties. (The converter
    in llama-cpp-python 0.3.36 mishandles additionalProperties: true, so that case is left
    to the parser, which reads any key.)"""
    for extra in ({}, {"additionalProperties": False}):
        tool = {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer"}}, **extra}}}
        for case in ("hermes", "llama3", "mistral"):
            grammar = CASES[case].grammar([tool], "f")
            text = _raw(case, "f", {"a": 1, "b": 2})
            assert not accepts(grammar, text), (case, extra)
            assert accepts(grammar, _raw(case, "f", {"a": 1})), (case, extra)


def test_response_format_grammars_admit_json_and_refuse_prose():
    grammar, status = response_grammar({"type": "json_schema", "json_schema": {
        "name": "p", "schema": {"type": "object", "properties": {"age": {"type": "integer"}},
                                "required": ["age"]}}})
    assert status == "applied"
    assert accepts(grammar, '{"age": 3}') and not accepts(grammar, '{"age": "3"}')
    assert not accepts(grammar, '{"age": 3} ok')
    any_object, status = response_grammar({"type": "json_object"})
    assert status == "applied" and accepts(any_object, '{"x": [1, {"y": null}]}')
    assert response_grammar({"type": "yaml"}) == (None, "ignored_unknown_type")


@pytest.mark.parametrize("case", ["hermes", "json", "llama3", "mistral"])
def test_a_raw_control_character_the_json_grammar_admits_is_read(case):
    """llama.cpp's JSON string rule admits a raw tab or line break inside a string, which a
    strict JSON reader refuses: the parser reads them (regression guard for strict=True)."""
    text = render(case, "get_weather", {"city": "Paris"}, True, "compact").replace(
        '"Paris"', '"Pa\tr\nis"')
    prefix, grammar = forced(case, "get_weather", True)
    assert accepts(grammar, text)
    calls = CASES[case].parse(prefix + text, TOOLS)
    assert json.loads(calls[0].arguments) == {"city": "Pa\tr\nis"}
