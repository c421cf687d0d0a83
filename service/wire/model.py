"""Request bodies declared once, as pydantic models: the model validates (a 400 naming the
field), parses into typed values, and emits the JSON Schema that /openapi.json publishes
(`body_schema`), so the document states what the server enforces.

Every body model derives from `Wire`: strict types (no "8" for an integer, no true for a
number), unknown fields ignored, and an optional field written ``X | None = None`` so that
null counts as absent (the document says those properties are nullable).

A field whose problem deserves its own words carries ``Says("...")`` in its ``Annotated``
metadata: any error inside that field (missing included, for a top-level one) is answered
with that message, ``{at}`` replaced by the field's path and ``{got}`` by the value's repr.
`validate` turns pydantic's first error into the spec's 400: the message names the field's
path (``messages[0].content``), ``param`` the top-level field unless a `Says` names another.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError, core_schema

from hypnos.service.errors import InvalidRequest

CUSTOM = "hypnos"          # the error type a `Says` or a validator raises
M = TypeVar("M", bound=BaseModel)


class Wire(BaseModel):
    """The base of every request body: strict, unknown fields ignored."""
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


def refuse(message: str, param: str | None = None) -> PydanticCustomError:
    """The error a validator raises for a message of its own (``{at}`` is the path)."""
    return PydanticCustomError(CUSTOM, "{say}", {"say": message, "param": param})


@dataclass(frozen=True)
class Says:
    """``Annotated`` metadata: the message for any problem inside this field."""
    message: str
    param: str | None = None
    on: tuple[str, ...] = ()     # only these error types (all, when empty)

    def __get_pydantic_core_schema__(self, source, handler):
        inner = handler(source)

        def wrap(value, next_):
            try:
                return next_(value)
            except ValidationError as exc:
                kinds = {e["type"] for e in exc.errors()}
                if CUSTOM in kinds or (self.on and not kinds <= set(self.on)):
                    raise          # said deeper already, or not this Says' business
                raise refuse(self.message, self.param) from None
        return core_schema.no_info_wrap_validator_function(wrap, inner)


# ------------------------------------------------------------------ errors

KINDS = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
         "bool_type": "a boolean", "list_type": "an array", "dict_type": "an object",
         "model_type": "an object", "model_attributes_type": "an object",
         "none_required": "null", "literal_error": "another value"}
JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array",
              dict: "object", type(None): "null"}


def _path(loc: tuple, body: Any, missing: bool = False) -> tuple[str, str | None]:
    """(the field's path in the body, its top-level name), walking the body alongside the
    location so that pydantic's union tags ('str', 'list[...]', a role) drop out."""
    at, top, value = "", None, body
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value):
            at, value = f"{at}[{part}]", value[part]
        elif isinstance(part, str) and isinstance(value, dict) and (
                part in value or (last and missing)):
            at = f"{at}.{part}" if at else part
            top = top or part
            value = value.get(part)
    return at, top


def _says_for_missing(model: type[BaseModel], loc: tuple) -> Says | None:
    if len(loc) != 1 or loc[0] not in model.model_fields:
        return None
    return next((m for m in model.model_fields[loc[0]].metadata if isinstance(m, Says)), None)


def _message(err: dict, at: str, model: type[BaseModel]) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    where = f"'{at}'" if at else "The body"
    if kind == "missing":
        return f"{where} is required"
    if kind in ("string_too_short",):
        return f"{where} must be a non-empty string"
    if kind == "too_short":
        return f"{where} must be a non-empty array" if ctx.get("min_length") == 1 else \
            f"{where} must hold at least {ctx.get('min_length')} items"
    if kind == "too_long":
        return f"{where} holds more than {ctx.get('max_length')} items"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        word = {"greater_than_equal": "at least", "greater_than": "above",
                "less_than_equal": "at most", "less_than": "below"}[kind]
        bound = next(iter(v for k, v in ctx.items() if k in ("ge", "gt", "le", "lt")))
        return f"{where} must be {word} {bound}, got {got!r}"
    if kind in ("literal_error", "enum"):
        return f"{where} must be one of {ctx.get('expected', '')}; got {got!r}"
    if kind == "union_tag_invalid":
        field = ctx.get("discriminator", "").strip("'")
        return (f"'{at}.{field}' must be one of {ctx.get('expected_tags', '')}; "
                f"got {ctx.get('tag')!r}")
    if kind == "union_tag_not_found":
        field = ctx.get("discriminator", "").strip("'")
        return f"'{at}.{field}' is required" if at else f"'{field}' is required"
    if kind in KINDS:
        return f"{where} must be {KINDS[kind]}, got {JSON_TYPES.get(type(got), 'another type')}"
    return f"{where}: {err['msg']}"


def _depth(at: str) -> int:
    return at.count(".") + at.count("[") + bool(at)


def invalid(exc: ValidationError, body: Any, model: type[BaseModel]) -> InvalidRequest:
    """The 400 for pydantic's errors: the deepest error (the union member that got furthest
    says what is wrong), custom messages first; type errors at one path read as one."""
    found = [(e, *_path(e["loc"], body, e["type"] == "missing")) for e in exc.errors()]
    pool = [f for f in found if f[0]["type"] == CUSTOM] or found
    depth = max(_depth(f[1]) for f in pool)
    best = [f for f in pool if _depth(f[1]) == depth]
    err, at, top = best[0]
    if err["type"] == CUSTOM:
        ctx = err["ctx"]
        text = ctx["say"].replace("{at}", at).replace("{got}", repr(err.get("input")))
        param = (ctx.get("param") or "").replace("{at}", at)
        return InvalidRequest(text, param=param or top)
    if err["type"] == "missing" and (says := _says_for_missing(model, err["loc"])):
        return InvalidRequest(says.message.replace("{at}", at).replace("{got}", "None"),
                              param=says.param or top)
    same = [f[0] for f in best if f[1] == at and f[0]["type"] in KINDS]
    if len(same) > 1 and err["type"] in KINDS:
        shapes = dict.fromkeys(KINDS[e["type"]] for e in same)
        where = f"'{at}'" if at else "The body"
        return InvalidRequest(f"{where} must be {' or '.join(shapes)}, got "
                              f"{JSON_TYPES.get(type(err.get('input')), 'another type')}",
                              param=top)
    return InvalidRequest(_message(err, at, model), param=top)


def input_texts(value: str | list[str], max_prompt_chars: int) -> list[str]:
    """An ``input`` of one text or several as a list, or the 400 when together they hold more
    than ``max_prompt_chars`` characters (embeddings, entities)."""
    texts = [value] if isinstance(value, str) else list(value)
    chars = sum(len(t) for t in texts)
    if chars > max_prompt_chars:
        raise InvalidRequest(f"The input holds {chars} characters, above max_prompt_chars "
                             f"({max_prompt_chars})", param="input")
    return texts


def validate(model: type[M], body: Any) -> M:
    """``body`` (a parsed JSON object) as ``model``, or the 400 naming the field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid(exc, body, model) from None


# ------------------------------------------------------------------ the schema

def _inline(node: Any, defs: dict) -> Any:
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **_inline(rest, defs)}
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        elif key in ("title", "discriminator") or (key == "default" and value is None):
            continue       # titles are noise; the discriminator's mapping names $defs
        else:
            out[key] = _inline(value, defs)
    return _fold_null(out)


def _fold_null(node: dict) -> dict:
    """``anyOf: [X, null]`` with one simple X reads as X with "null" among its types (and
    its enum), the shape the rest of the document uses."""
    options = node.get("anyOf")
    if not (isinstance(options, list) and len(options) == 2 and {"type": "null"} in options):
        return node
    other = next(o for o in options if o != {"type": "null"})
    if not isinstance(other.get("type"), str) or "anyOf" in other or "oneOf" in other:
        return node
    merged = {**{k: v for k, v in node.items() if k != "anyOf"}, **other,
              "type": [other["type"], "null"]}
    if "enum" in merged:
        merged["enum"] = [*merged["enum"], None]
    if "const" in merged:
        merged["enum"] = [merged.pop("const"), None]
    return merged


def body_schema(model: type[BaseModel]) -> dict:
    """The model's JSON Schema for the document: $defs inlined (OpenAPI 3.1 reads it)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return _inline(schema, defs)
