"""Which served model an agent client gets: pure, over plain data read from the server.

A model suits a client when it generates text, calls tools, and its per-request context holds
the client's first prompt plus the answer the server lets it ask for (the client's own
``max_tokens`` clamped by the server's ``limits.max_tokens_cap``).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServedModel:
    """One chat model as the server describes it."""
    id: str
    context: int                 # per-request context a client may plan against (tokens)
    tools: bool                  # has a tool-call format
    resident: bool = False       # in tier 1 now (no load on the first request)
    thinking: bool | None = None  # reasons before answering (None: the server's catalog
    #                               does not say)
    max_output: int | None = None  # the server's cap on one answer, when it says


@dataclass(frozen=True)
class Needs:
    """What one client's first turn asks of the model."""
    client: str
    prompt_tokens: int           # its first request, system prompt and tools included
    max_tokens: int              # the answer it asks for (before the server's cap)


@dataclass(frozen=True)
class Choice:
    model: ServedModel
    output_tokens: int           # the answer the client can get: its ask, clamped
    warnings: tuple[str, ...] = field(default=())


class NoModel(Exception):
    """No chat model is served (message says what to do)."""


def output_tokens(needs: Needs, model: ServedModel, cap: int) -> int:
    """The answer length the client gets: its ask, clamped by the server's cap."""
    limit = min(cap, model.max_output) if model.max_output else cap
    return min(needs.max_tokens, limit)


def shortfall(needs: Needs, model: ServedModel, cap: int) -> int:
    """Tokens the model's context lacks for the first prompt plus the clamped answer (0: it
    holds them)."""
    return max(0, needs.prompt_tokens + output_tokens(needs, model, cap) - model.context)


def choose(models: list[ServedModel], needs: Needs, cap: int,
           named: str | None = None) -> Choice:
    """The model named (whatever it lacks: warnings say what), else the first one, in the
    server's order, that calls tools and holds the prompt, resident ones first; else the tool
    caller with the largest context, with a warning. Raises NoModel when nothing generates
    text, or the named model is not served."""
    if named is not None:
        found = next((m for m in models if m.id == named), None)
        if found is None:
            served = ", ".join(m.id for m in models) or "none"
            raise NoModel(f"the server has no chat model '{named}' (chat models: {served})")
        return Choice(found, output_tokens(needs, found, cap), tuple(_warnings(found, needs, cap)))
    if not models:
        raise NoModel("the server serves no chat model: add one to its config "
                      "(hypnos advise --needs chat prints a lineup)")
    callers = [m for m in models if m.tools] or models
    fitting = [m for m in callers if shortfall(needs, m, cap) == 0]
    if fitting:
        best = sorted(fitting, key=lambda m: not m.resident)[0]
    else:
        best = max(callers, key=lambda m: m.context)
    return Choice(best, output_tokens(needs, best, cap), tuple(_warnings(best, needs, cap)))


def _warnings(model: ServedModel, needs: Needs, cap: int) -> list[str]:
    out = []
    if not model.tools:
        out.append(f"{model.id} has no tool-call format: {needs.client} cannot run its tools "
                   "with it")
    lack = shortfall(needs, model, cap)
    if lack:
        answer = output_tokens(needs, model, cap)
        out.append(
            f"{model.id} serves {model.context:,} tokens per request, but {needs.client}'s "
            f"first prompt is about {needs.prompt_tokens:,} tokens and it may get "
            f"{answer:,} back (limits.max_tokens_cap {cap:,}): {lack:,} short. Give the model "
            "a larger context_len in the server's config (hypnos advise --needs agents "
            "sizes it)")
    return out
