"""How a model family writes tool calls and thinking, and a request prepared for it.

A ``ChatFormat`` pairs a ``ToolDialect`` (``dialects``: how calls are written, parsed and
forced) with an optional ``ThinkDialect`` (the delimiters of the thinking block); ``detect``
picks them from the chat template. ``prepare`` turns a request into what the engine
renders: the messages as the template wants them, template variables, text appended after the
generation prompt (a forced call's opening), the GBNF grammar, the thinking budget.

Everything here is pure string work (no llama.cpp), unit-tested on sample outputs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from hypnos.engines.chat_format.dialects import JsonDialect, ToolDialect
from hypnos.engines.chat_format.markup_dialects import DIALECTS, HarmonyDialect

#: Content parts that carry media (through the model's projector), not text.
MEDIA_PARTS = ("image_url", "input_audio")
#: Thinking-token budgets of ``reasoning_effort`` (spec 7.1); None = unbounded.
EFFORT_BUDGETS = {"none": 0, "minimal": 512, "low": 512, "medium": 2048, "high": 6144}
TOOL_FORMATS = ("auto", "none", *DIALECTS)


@dataclass(frozen=True)
class ThinkDialect:
    open: str
    close: str
    #: What the server writes to close the block when the budget is spent (None: ``close``
    #: and a blank line). Harmony's close is a control token llama.cpp does not render, so
    #: ``close`` is what is seen after it and ``inject`` what is written.
    inject: str | None = None

    @property
    def closing(self) -> str:
        return self.close + "\n\n" if self.inject is None else self.inject


@dataclass
class ChatFormat:
    tools: ToolDialect | None
    think: ThinkDialect | None
    #: The template reads ``tools`` (else the json dialect's instructions are injected).
    template_reads_tools: bool = False
    template_reads_tool_calls: bool = False
    #: The answer is harmony messages (gpt-oss): read by ``harmony.HarmonySplitter``.
    harmony: bool = False


# --------------------------------------------------------------------- preparation

@dataclass
class Prepared:
    """What the engine renders and how it reads the answer."""
    messages: list[dict]
    template_vars: dict = field(default_factory=dict)
    tools: list[dict] | None = None      # handed to the template (native dialects)
    prefix: str = ""                     # appended after the generation prompt
    grammar: str | None = None
    think_budget: int | None = None      # thinking tokens; 0 = close at once; None = no bound
    tools_active: bool = False
    forced: bool = False                 # the answer is one call, under ``grammar``


def think_budget(think: bool | None, effort: str | None, budget: int | None) -> int | None:
    """Thinking tokens allowed: 0 = off (a block the model opens is closed at once), None =
    unbounded. ``budget`` (Pantheon's reasoning_budget) wins, then effort, then think."""
    if budget is not None:
        return max(budget, 0)
    if effort is not None:
        return EFFORT_BUDGETS[effort]
    return None if think else 0


def prepare(fmt: ChatFormat, messages: list[dict], tools: list[dict] | None,
            tool_choice, budget: int | None, grammar: str | None) -> Prepared:
    """Messages and sampling constraints for one request. ``tool_choice`` is "auto",
    "none", "required" or a function name; ``budget`` from ``think_budget``."""
    active = bool(tools) and tool_choice != "none" and fmt.tools is not None
    dialect = fmt.tools
    forced = active and tool_choice != "auto"
    out = Prepared(messages=[_history_message(m, dialect, fmt) for m in messages],
                   tools_active=active, think_budget=budget, forced=forced)
    if active and (dialect.native and fmt.template_reads_tools):
        out.tools = tools
    elif active:
        out.messages = _with_instructions(out.messages, JsonDialect.instructions(tools))
    if forced or grammar:
        out.think_budget = 0           # a constrained answer cannot think first
    if forced:
        name = None if tool_choice == "required" else tool_choice
        out.prefix = dialect.forced_prefix(name)
        out.grammar = dialect.grammar(tools, name)
    elif grammar and not active:
        out.grammar = grammar
    if fmt.think is not None:
        out.template_vars["enable_thinking"] = out.think_budget != 0
    if fmt.harmony:
        out.template_vars["reasoning_effort"] = HarmonyDialect.reasoning_effort(
            out.think_budget)
    return out


def _with_instructions(messages: list[dict], text: str) -> list[dict]:
    if messages and messages[0].get("role") in ("system", "developer"):
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{text}".strip()
        return [first] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def _history_message(m: dict, dialect: ToolDialect | None, fmt: ChatFormat) -> dict:
    """A history message as the template gets it: no reasoning_content (spec: dropped from
    the prompt), tool calls with their arguments as objects, and for templates that know
    nothing of tools, calls and results written out as text."""
    out = {k: v for k, v in m.items() if k != "reasoning_content"}
    if out.get("role") == "developer":
        out["role"] = "system"
    calls = out.get("tool_calls")
    if calls:
        plain = [{"name": c.get("function", {}).get("name", ""),
                  "arguments": _loads_or_keep(c.get("function", {}).get("arguments", "{}"))}
                 for c in calls if isinstance(c, dict)]
        if fmt.template_reads_tool_calls and dialect is not None and dialect.native:
            out["tool_calls"] = [{**c, "function": {**c.get("function", {}),
                                                    "arguments": p["arguments"]}}
                                 for c, p in zip(calls, plain, strict=True)]
        else:
            writer = dialect or JsonDialect()
            text = "\n".join(writer.render_call(p) for p in plain)
            out.pop("tool_calls")
            out["content"] = (_text(out.get("content")) + "\n" + text).strip()
    if out.get("role") == "tool" and not (fmt.template_reads_tool_calls and dialect is not None
                                          and dialect.native):
        out = {"role": "user", "content": f"Tool result: {_text(out.get('content'))}"}
    return out


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _loads_or_keep(raw):
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
            return value if isinstance(value, dict) else {"value": value}
        except json.JSONDecodeError:
            return {"value": raw}
    return raw if isinstance(raw, dict) else {}
