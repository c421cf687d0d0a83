"""Scoring of `tool_calls.py`: the case set, the check of one chat completion against its
case, and the per-row rates. Pure (no server, no model): a response is the decoded JSON body
of a `/v1/chat/completions` answer, or None when the request failed.

A case (`tool_cases.json`) names the tools it offers (from the file's shared list), the user
message, the tool it expects (null: none is needed) and predicates on that call's arguments,
keyed by a dotted path into the arguments object (``items.0.sku``):

- ``{"contains": "paris"}`` or ``{"contains": ["nyc", "new york"]}``: a string holding one of
  them, case-insensitively;
- ``{"in": ["celsius", "c"]}``: a string equal to one of them, case- and space-insensitively;
- ``{"eq": 3}`` / ``{"eq": true}``: that number (an int or a float, not a bool) / that bool;
- ``{"has": ["ops", "security"]}``: a list with, for each of them, an item holding it;
- ``{"len": 2}``: a list of that length.

A text answer that holds a call written out (``<tool_call>``, or a JSON object with a "name"
and then "arguments" or "parameters" key, as small models write one when their server did
not parse it) is no answer to a case that needs no tool, and is counted in "call in text"
where a call is expected: a server that parsed it would have returned a call.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

CASES_PATH = Path(__file__).resolve().with_name("tool_cases.json")
#: The columns printed for a row and compared between servers, in order: (key, title).
COLUMNS = (("valid", "valid call"), ("right_tool", "right tool"),
           ("right_args", "right args"), ("no_tool", "no tool"))
#: Printed after them, not compared: over the cases expecting a call, how many answers wrote
#: one in their text instead.
TEXT_CALL = ("text_call", "call in text")
CALL_IN_TEXT = re.compile(
    r'<tool_call>|"name"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters)"\s*:')
#: How the problem of a request that got no answer starts (the error follows).
FAILED = "request failed: "


@dataclass(frozen=True)
class Case:
    id: str
    kind: str                       # single, choice, multi, nested, none
    tools: list[dict]               # the OpenAI tool objects offered
    user: str
    expect: str | None              # the tool to call; None: answer without one
    args: dict[str, dict]           # dotted path -> predicate


def load_cases(path: Path = CASES_PATH) -> list[Case]:
    """The fixed case set; each case's tool names resolved to the file's tool objects.
    Raises KeyError for a name the file's tool list lacks."""
    data = json.loads(path.read_text())
    by_name = {t["function"]["name"]: t for t in data["tools"]}
    return [Case(c["id"], c["kind"], [by_name[n] for n in c["tools"]], c["user"],
                 c["expect"], c["args"]) for c in data["cases"]]


@dataclass(frozen=True)
class Outcome:
    """One case on one (server, model, tool_choice). ``valid``, ``right_tool``,
    ``right_args`` and ``text_call`` are None for a case that needs no call, ``no_tool`` for
    one that does."""
    case: str
    valid: bool | None
    right_tool: bool | None
    right_args: bool | None
    no_tool: bool | None
    text_call: bool | None
    called: str | None              # the first call's function name
    arguments: str | None           # its arguments as sent
    content: str | None             # the answer's text
    problem: str | None             # why the call is not valid / right, or the request error


def first_call(response: dict) -> tuple[dict | None, str | None]:
    """(the first tool call's function object, the message text) of a response."""
    message = response["choices"][0].get("message") or {}
    calls = message.get("tool_calls") or []
    return (calls[0].get("function") or {}) if calls else None, message.get("content")


def call_problem(function: dict, tools: list[dict]) -> str | None:
    """Why a call is not valid (None: it is): its name must be an offered tool's, and its
    arguments must parse as a JSON object that the tool's parameter schema admits."""
    schema = next((t["function"].get("parameters") or {} for t in tools
                   if t["function"]["name"] == function.get("name")), None)
    if schema is None:
        return f"unknown tool {function.get('name')!r}"
    try:
        args = json.loads(function.get("arguments") or "")
    except (TypeError, ValueError) as e:
        return f"arguments are not JSON: {e}"
    if not isinstance(args, dict):
        return "arguments are not a JSON object"
    error = next(iter(Draft202012Validator(schema).iter_errors(args)), None)
    return None if error is None else f"schema: {error.message}"


def lookup(args: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at a dotted path; a numeric part indexes a list."""
    value = args
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def holds(predicate: dict, value: Any) -> bool:
    """Whether ``value`` meets one predicate (see the module's list)."""
    (op, want), = predicate.items()
    if op == "contains":
        alternatives = want if isinstance(want, list) else [want]
        return isinstance(value, str) and any(a.lower() in value.lower() for a in alternatives)
    if op == "in":
        return isinstance(value, str) and value.strip().lower() in {w.lower() for w in want}
    if op == "eq":
        if isinstance(want, bool) or isinstance(value, bool):
            return value is want
        return isinstance(value, int | float) and abs(value - want) < 1e-9
    if op == "has":
        return isinstance(value, list) and all(
            any(w.lower() in str(item).lower() for item in value) for w in want)
    if op == "len":
        return isinstance(value, list) and len(value) == want
    raise ValueError(f"unknown predicate {op!r}")


def args_problem(case: Case, arguments: str) -> str | None:
    """The first predicate of ``case`` that valid ``arguments`` miss (None: all hold)."""
    args = json.loads(arguments)
    for path, predicate in case.args.items():
        found, value = lookup(args, path)
        if not found:
            return f"{path} missing"
        if not holds(predicate, value):
            return f"{path} = {json.dumps(value)} fails {json.dumps(predicate)}"
    return None


def score(case: Case, response: dict | None, error: str | None = None) -> Outcome:
    """The outcome of one answer. A failed request (``response`` None) scores as no valid
    call and no answer. Only the first call counts: a right call after a wrong one is wrong."""
    if response is None:
        call, answer = (False, None) if case.expect else (None, False)
        return Outcome(case.id, call, call, call, answer, call, None, None, None,
                       FAILED + (error or "?"))
    function, content = first_call(response)
    name = function.get("name") if function else None
    arguments = function.get("arguments") if function else None
    in_text = function is None and CALL_IN_TEXT.search(content or "") is not None
    if case.expect is None:
        problem = ("called a tool" if function else "a call in the text" if in_text else
                   None if (content or "").strip() else "empty answer")
        return Outcome(case.id, None, None, None, problem is None, None, name, arguments,
                       content, problem)
    if function is None:
        return Outcome(case.id, False, False, False, None, in_text, None, None, content,
                       "a call in the text" if in_text else "no call")
    invalid = call_problem(function, case.tools)
    right_tool = name == case.expect
    problem = invalid or (None if right_tool else f"called {name}, expected {case.expect}")
    if problem is None:
        problem = args_problem(case, arguments or "")
    return Outcome(case.id, invalid is None, right_tool, problem is None, None, False, name,
                   arguments, content, problem)


def answer_of(record: dict) -> tuple[dict | None, str | None]:
    """The (response, error) an outcome recorded as a dict (``dataclasses.asdict``) was
    scored from, as far as scoring reads it: so that a saved run can be scored again."""
    problem = record.get("problem") or ""
    if problem.startswith(FAILED):
        return None, problem[len(FAILED):]
    calls = [] if record["called"] is None else [{"type": "function", "function": {
        "name": record["called"], "arguments": record["arguments"]}}]
    message = {"role": "assistant", "content": record["content"], "tool_calls": calls}
    return {"choices": [{"index": 0, "message": message}]}, None


def rates(outcomes: list[Outcome]) -> dict[str, tuple[int, int]]:
    """Column key -> (hits, cases it applies to) over one row's outcomes."""
    out = {}
    for key, _ in (*COLUMNS, TEXT_CALL):
        marks = [getattr(o, key) for o in outcomes if getattr(o, key) is not None]
        out[key] = (sum(marks), len(marks))
    return out


def fraction(hits_of: tuple[int, int]) -> float | None:
    hits, of = hits_of
    return hits / of if of else None


def ratio(ours: tuple[int, int], theirs: tuple[int, int]) -> str:
    """Ours / theirs of two rates, as printed: "-" where either has no case or both are 0,
    "inf" where only theirs is."""
    a, b = fraction(ours), fraction(theirs)
    if a is None or b is None or a == b == 0:
        return "-"
    return "inf" if b == 0 else f"{a / b:.2f}"
