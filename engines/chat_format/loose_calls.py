"""Tool calls a trained model writes outside its dialect: a JSON call, bare or fenced.

Small instruct models asked with tools often answer with the call as plain JSON instead of
their native markup, e.g. Qwen2.5-Coder-0.5B under its Hermes template writes
```` ```json {"name": "get_weather", "arguments": {"city": "Paris"}} ``` ```` or the bare
object. ``read_loose`` reads such an answer as calls, but only when the WHOLE answer
(whitespace and fences aside) is calls, each naming an offered tool with arguments that
conform to its JSON schema; anything else (prose around the JSON, a tool nobody offered,
arguments that do not conform) is not a call and stays the model's text.

An answer is read as a sequence of parts separated by whitespace or commas: fenced blocks
(```` ``` ```` or ```` ```json ````, holding JSON values) and bare JSON values. Each value is
a call object or a non-empty list of them. A call object has a string ``name`` and at most
one of ``arguments`` / ``parameters`` (an object, or a JSON string of one; absent means
``{}``), and no other keys.

``may_be_loose`` is the streaming half: False once a prefix of the answer can no longer
grow into calls (so the held text can be released at once), never False for a prefix of an
answer ``read_loose`` accepts. Pure; no llama.cpp.
"""
from __future__ import annotations

import json

from hypnos.engines.records import ToolCall

__all__ = ["conforms", "may_be_loose", "read_loose"]

#: The keys a call object may have.
CALL_KEYS = frozenset({"name", "arguments", "parameters"})
#: Fence languages that hold JSON ("" is a fence with no language).
FENCE_LANGS = ("", "json")
FENCE = "```"
_DECODER = json.JSONDecoder(strict=False)
_SEPARATORS = " \t\r\n,"


def read_loose(text: str, tools: list[dict] | None) -> list[ToolCall] | None:
    """The calls ``text`` is, all of it, or None when it is not calls of ``tools``."""
    return _scan(text, _schemas(tools), final=True) or None


def may_be_loose(text: str, tools: list[dict] | None) -> bool:
    """False when no continuation of ``text`` can be calls of ``tools`` (``read_loose``)."""
    return _scan(text, _schemas(tools), final=False) is not None


def _schemas(tools: list[dict] | None) -> dict[str, dict]:
    """Offered tool name -> its parameters' JSON schema."""
    out = {}
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


# --------------------------------------------------------------------- the answer's parts

def _scan(text: str, tools: dict[str, dict], final: bool) -> list[ToolCall] | None:
    """The calls of ``text``'s parts; None when a part is not calls. ``final=False``: the
    text may go on, so an unfinished last part is judged by its head (``_open_head_ok``)
    and the calls so far are returned while it could still become calls."""
    calls: list[ToolCall] = []
    i = 0
    while True:
        while i < len(text) and text[i] in _SEPARATORS:
            i += 1
        rest = text[i:]
        if not rest:
            return calls if calls or not final else None
        if rest.startswith(FENCE) or (not final and FENCE.startswith(rest)):
            end = text.find(FENCE, i + len(FENCE)) if len(rest) >= len(FENCE) else -1
            if end < 0:
                return None if final or not _open_fence_ok(rest[len(FENCE):], tools) \
                    else calls
            found = _fenced(text[i + len(FENCE):end], tools)
            i = end + len(FENCE)
        else:
            if rest[0] not in "{[":
                return None
            try:
                value, i = _DECODER.raw_decode(text, i)
            except json.JSONDecodeError:
                return None if final or not _open_head_ok(rest, tools) else calls
            found = _calls_of(value, tools)
        if not found:
            return None
        calls += found


def _fenced(inner: str, tools: dict[str, dict]) -> list[ToolCall] | None:
    """The calls of a closed fence's inside (language line included)."""
    lang, end = _lang(inner)
    return _scan(inner[end:], tools, final=True) if lang in FENCE_LANGS else None


def _open_fence_ok(inner: str, tools: dict[str, dict]) -> bool:
    """A fence not closed yet (``inner``: what follows its opening backticks) can still
    hold calls."""
    lang, end = _lang(inner)
    if end == len(inner):                        # the language may still grow
        return any(known.startswith(lang) for known in FENCE_LANGS)
    # Backticks at the end of the body, read as a fence's start, may be its close.
    return lang in FENCE_LANGS and _scan(inner[end:], tools, final=False) is not None


def _lang(inner: str) -> tuple[str, int]:
    """(the language a fence's inside starts with, lowercased; where it ends): letters,
    digits and _+- after spaces, on the fence's line."""
    i = j = len(inner) - len(inner.lstrip(" \t"))
    while j < len(inner) and (inner[j].isalnum() or inner[j] in "_+-"):
        j += 1
    return inner[i:j].lower(), j


def _open_head_ok(head: str, tools: dict[str, dict]) -> bool:
    """An unfinished JSON value (``head`` starts with { or [) can still be calls: a call
    object (or a list starting with one) whose first key is a call key and, when that key
    is ``name``, whose name is (the start of) an offered tool's. Undecidable heads (escapes
    in a string, a broken value) pass: ``read_loose`` decides them at the end."""
    s = head
    if s[0] == "[":
        s = s[1:].lstrip()
        if not s:
            return True
        if s[0] != "{":
            return False
    s = s[1:].lstrip()
    if not s:
        return True
    if s[0] != '"':
        return False
    key, closed, s = _string_head(s)
    if key is None:
        return True
    if not closed:
        return any(k.startswith(key) for k in CALL_KEYS)
    if key not in CALL_KEYS:
        return False
    s = s.lstrip()
    if key != "name" or not s:
        return True
    if s[0] != ":":
        return False
    s = s[1:].lstrip()
    if not s:
        return True
    if s[0] != '"':
        return False
    name, closed, _ = _string_head(s)
    if name is None:
        return True
    return name in tools if closed else any(n.startswith(name) for n in tools)


def _string_head(s: str) -> tuple[str | None, bool, str]:
    """(the text of the JSON string ``s`` starts with, whether it closed, what follows);
    the text is None when it holds an escape (not read here)."""
    body = s[1:]
    end = next((i for i, c in enumerate(body) if c in '"\\'), len(body))
    if end == len(body):
        return body, False, ""
    if body[end] == "\\":
        return None, False, ""
    return body[:end], True, body[end + 1:]


# --------------------------------------------------------------------- one value

def _calls_of(value, tools: dict[str, dict]) -> list[ToolCall] | None:
    """A call object or a non-empty list of them, each a valid call of an offered tool."""
    calls = []
    for item in value if isinstance(value, list) else [value]:
        call = _call(item, tools)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _call(obj, tools: dict[str, dict]) -> ToolCall | None:
    if not isinstance(obj, dict) or set(obj) - CALL_KEYS or \
            ("arguments" in obj and "parameters" in obj):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or name not in tools:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict) or not conforms(args, tools[name] or {"type": "object"}):
        return None
    return ToolCall(name, json.dumps(args, ensure_ascii=False))


# --------------------------------------------------------------------- JSON schema

def _is_integer(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or \
        (isinstance(v, float) and v.is_integer())


_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _same(a, b) -> bool:
    """JSON equality (True is not 1)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def conforms(value, schema) -> bool:
    """``value`` conforms to ``schema`` in the JSON-schema subset tool parameters use:
    type (one or a list), enum, const, properties, required, additionalProperties, items,
    anyOf / oneOf (read as: at least one), allOf. Other keywords, and type names it does
    not know, pass."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_TYPES.get(k, lambda v: True)(value) for k in kinds if isinstance(k, str)):
            return False
    if isinstance(schema.get("enum"), list) and not any(_same(value, e) for e in schema["enum"]):
        return False
    if "const" in schema and not _same(value, schema["const"]):
        return False
    if isinstance(value, dict) and not _object_conforms(value, schema):
        return False
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, (dict, bool)) and \
            not all(conforms(v, items) for v in value):
        return False
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and not any(conforms(value, s)
                                                         for s in schema[key]):
            return False
    return not isinstance(schema.get("allOf"), list) or \
        all(conforms(value, s) for s in schema["allOf"])


def _object_conforms(value: dict, schema: dict) -> bool:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    if isinstance(required, list) and any(isinstance(k, str) and k not in value
                                          for k in required):
        return False
    extra = schema.get("additionalProperties", True)
    return all(conforms(item, props.get(key, extra)) for key, item in value.items())
