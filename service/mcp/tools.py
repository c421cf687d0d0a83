"""The MCP tools: what each is called, the schema of its arguments, which pool models can
serve it, and the one way a call ends (a result, or a tool error result the agent reads).

    tools = listed_tools(ctx)              # the tools/list answer for this request
    result = await call_tool(ctx, name, arguments)

A tool names the models that can serve it in its description and as the ``model``
argument's enum, read from the pool when the list is asked for. A tool with no model to
serve it is still listed (its description says so) and refuses when called, except
`generate_image` and `rerank`, which are listed only where a model can serve them. Every
refusal -- no model, a bad argument, a path outside the roots, the scheduler's or the key's
limits (an `errors.HypnosError`) -- is an MCP tool error result (``isError``), so an agent
reads it as it reads any failed tool, and the HTTP exchange itself succeeds.
"""
from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types

from hypnos.planner.types import Tier
from hypnos.service import errors
from hypnos.service.inference.capabilities import Family, require
from hypnos.service.mcp.context import ToolContext
from hypnos.service.mcp.files import read_allowed
from hypnos.service.mcp.refusal import ToolRefused
from hypnos.service.scheduling.pool import ModelState

TIER_ORDER = {Tier.GPU: 0, Tier.RAM: 1, Tier.SSD: 2}


Run = Callable[[ToolContext, dict, str], Awaitable[types.CallToolResult]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    summary: str                        # the description's first sentence(s)
    properties: dict[str, Any]          # the arguments besides "model"
    required: tuple[str, ...]
    run: Run                            # (ctx, arguments, model id) -> result
    family: Family | None = None        # None: the models come from `models` instead
    models: Callable[[ToolContext], list[str]] | None = None
    listed_when_empty: bool = True
    read_only: bool = True
    one_of: tuple[tuple[str, ...], ...] = field(default=())   # exactly one of these groups


# --------------------------------------------------------------------- the pool

def serving(ctx: ToolContext, family: Family) -> list[str]:
    """The enabled pool models that can serve ``family``, those already loaded first; a
    model known not to load here (its ``problem``: an engine this build lacks, an unreadable
    file) is left out."""
    sched = ctx.caller.sched
    found: list[ModelState] = []
    for st in sched.models.values():
        if not st.enabled or st.problem is not None:
            continue
        try:
            require(sched, st.id, family)
        except errors.HypnosError:
            continue
        found.append(st)
    found.sort(key=lambda st: TIER_ORDER.get(st.tier, 3))
    return [st.id for st in found]


def models_of(ctx: ToolContext, spec: ToolSpec) -> list[str]:
    if spec.models is not None:
        return spec.models(ctx)
    assert spec.family is not None, f"{spec.name}: give it a family or a models function"
    return serving(ctx, spec.family)


def choose_model(ctx: ToolContext, spec: ToolSpec, arguments: dict) -> str:
    """The model the call names (one that serves the tool), or the first that serves it."""
    models = models_of(ctx, spec)
    named = arguments.get("model")
    if named is not None and not isinstance(named, str):
        raise ToolRefused("'model' must be a string: the id of a pool model")
    if not models:
        raise ToolRefused(f"No model in this server's pool can serve {spec.name} now "
                          "(none is configured and enabled for it); resources/list shows "
                          "the pool")
    if named:
        resolved = ctx.caller.sched.resolve(named)
        if resolved not in models:
            raise ToolRefused(f"The model {named!r} cannot serve {spec.name}; the models "
                              f"that can: {', '.join(models)}")
        return resolved
    return models[0]


# --------------------------------------------------------------------- listing

def tool_of(ctx: ToolContext, spec: ToolSpec) -> types.Tool | None:
    """The tool as tools/list shows it now, or None where it is not offered."""
    models = models_of(ctx, spec)
    if not models and not spec.listed_when_empty:
        return None
    model_schema: dict[str, Any] = {"type": "string", "description": (
        "The pool model to use (default: the first listed, a loaded one first)")}
    if models:
        model_schema["enum"] = models
        served = f" Models that can serve it: {', '.join(models)}."
    else:
        served = " No model in this server's pool can serve it now: a call is refused."
    schema: dict[str, Any] = {"type": "object",
                              "properties": {**spec.properties, "model": model_schema},
                              "additionalProperties": False}
    if spec.required:
        schema["required"] = list(spec.required)
    return types.Tool(name=spec.name, title=spec.title, description=spec.summary + served,
                      input_schema=schema,
                      annotations=types.ToolAnnotations(title=spec.title,
                                                        read_only_hint=spec.read_only,
                                                        open_world_hint=False))


def listed(ctx: ToolContext, specs: list[ToolSpec]) -> list[types.Tool]:
    return [tool for spec in specs if (tool := tool_of(ctx, spec)) is not None]


# --------------------------------------------------------------------- calling

def refused(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def check_arguments(spec: ToolSpec, arguments: dict) -> None:
    """Unknown arguments, missing required ones, and the exactly-one-of groups."""
    unknown = sorted(set(arguments) - set(spec.properties) - {"model"})
    if unknown:
        raise ToolRefused(f"{spec.name} takes no argument {', '.join(map(repr, unknown))}; "
                          f"it takes: {', '.join([*spec.properties, 'model'])}")
    for name in spec.required:
        if arguments.get(name) in (None, ""):
            raise ToolRefused(f"'{name}' is required")
    for group in spec.one_of:
        given = [name for name in group if arguments.get(name) not in (None, "")]
        if len(given) != 1:
            raise ToolRefused(f"Send exactly one of {' or '.join(map(repr, group))}")


async def call_spec(ctx: ToolContext, spec: ToolSpec,
                    arguments: dict | None) -> types.CallToolResult:
    """Run the tool; every refusal is a tool error result (see the module docstring)."""
    arguments = arguments or {}
    try:
        check_arguments(spec, arguments)
        model = choose_model(ctx, spec, arguments)
        return await spec.run(ctx, arguments, model)
    except ToolRefused as exc:
        return refused(exc.message)
    except errors.HypnosError as exc:
        field_note = f" (argument {exc.param!r})" if exc.param else ""
        return refused(f"{exc.message}{field_note} [{exc.status} {exc.type}]")


def json_result(data: dict, text: str | None = None) -> types.CallToolResult:
    """A result whose text is ``text`` or ``data`` as JSON, with ``data`` as its
    structured content too."""
    body = text if text is not None else json.dumps(data, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(text=body)],
                                structured_content=data)


# --------------------------------------------------------------------- arguments

def text_arg(arguments: dict, name: str, default: str | None = None) -> str | None:
    value = arguments.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise ToolRefused(f"'{name}' must be a string")
    return value


def number_arg(arguments: dict, name: str, low: float, high: float,
               default: float | None = None, integer: bool = False) -> float | None:
    value = arguments.get(name)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise ToolRefused(f"'{name}' must be {kind} from {low:g} to {high:g}, got {value!r}")
    return value


def file_bytes(ctx: ToolContext, arguments: dict, b64_name: str, max_bytes: int,
               limit_name: str) -> tuple[bytes, str | None]:
    """The bytes a tool reads: base64 in ``b64_name``, or the file ``path`` names (under
    server.mcp_file_roots); with the file's name where there is one."""
    path = text_arg(arguments, "path")
    if path is not None:
        data = read_allowed(path, ctx.file_roots(), max_bytes, limit_name)
        return data, Path(path).name
    raw = text_arg(arguments, b64_name) or ""
    if raw.startswith("data:") and "," in raw:
        raw = raw.partition(",")[2]
    if len(raw) * 3 // 4 > max_bytes + 3:
        raise ToolRefused(f"'{b64_name}' holds about {len(raw) * 3 // 4} bytes; {limit_name} "
                          f"is {max_bytes}")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ToolRefused(f"'{b64_name}' is not valid base64") from None
    if not data:
        raise ToolRefused(f"'{b64_name}' is empty")
    if len(data) > max_bytes:
        raise ToolRefused(f"'{b64_name}' holds {len(data)} bytes; {limit_name} is {max_bytes}")
    return data, None
