"""A Responses body (`wire.responses`) translated into the chat request the inference layer
already runs (`to_chat_body`, `chat_body`), so a Responses call reaches every model through
the same lease, scheduler, telemetry, keys and request log as /v1/chat/completions.

The translation, item by item:

- ``instructions`` becomes the first system message (not carried over from a previous
  response, as OpenAI does);
- ``input`` as a string is one user message; a ``message`` item (``type`` may be left out)
  becomes a chat message, its ``input_text`` / ``output_text`` parts text parts and its
  ``input_image`` parts ``image_url`` parts (the existing vision path); ``developer`` is a
  system message;
- ``reasoning`` items, assistant messages and ``function_call`` items in a row become one
  assistant message (``reasoning_content``, ``content``, ``tool_calls`` with the call_id
  kept); ``function_call_output`` becomes a ``tool`` message answering that call_id (one that
  names no earlier call is a 400). ``custom_tool_call`` / ``_output`` items are read the same
  way (their ``input`` is the call's arguments);
- ``tools`` of type ``function`` become chat tools. **Every other tool type** (web_search,
  file_search, image_generation, namespace, local_shell, mcp, custom, ...) is a hosted or
  freeform tool this server does not run: it is **ignored**, and the response names the
  skipped types in ``hypnos_ignored_tools`` (Codex CLI sends such tools by default; a 400
  would refuse every Codex turn). A ``tool_choice`` that names such a tool is a 400;
- ``tool_choice`` ``auto | none | required | {type: function, name}`` maps onto the chat
  choices, ``{type: allowed_tools, mode, tools}`` keeps only the named functions;
- ``reasoning.effort`` becomes ``reasoning_effort`` (``xhigh``: high), the thinking budget;
- ``text.format`` ``json_schema | json_object`` becomes the structured-output grammar.

``previous_response_id`` puts the stored conversation (`StoredResponse.messages`) between the
instructions and the new input; the route resolves it (404 when unknown).
"""
from __future__ import annotations

import json
from typing import Any

from hypnos.service.errors import InvalidRequest
from hypnos.service.wire.responses import (EFFORTS, CallOutputItem, CustomCallItem,
                                           FunctionCallItem, InputFields, InputImage,
                                           InputText, Refusal, ReasoningItem, ResponsesBody,
                                           TextParam)

# ------------------------------------------------------------------ input items

def _parts(content: str | list, at: str) -> str | list[dict]:
    """Message content as chat content: a string, or text and image_url parts."""
    if isinstance(content, str):
        return content
    out: list[dict] = []
    for j, part in enumerate(content):
        where = f"{at}.content[{j}]"
        if isinstance(part, InputText):
            out.append({"type": "text", "text": part.text})
        elif isinstance(part, Refusal):
            out.append({"type": "text", "text": part.refusal})
        elif isinstance(part, InputImage):
            if not part.image_url:
                raise InvalidRequest(f"'{where}' needs an image_url (a URL or a data: URI); "
                                     "file ids are not served here", param="input")
            out.append({"type": "image_url", "image_url": {"url": part.image_url}})
        else:
            raise InvalidRequest(f"'{where}' is an input_file part, which this server does "
                                 "not read; convert the file with /v1/documents/convert",
                                 param="input")
    return out


def _text(content: str | list[dict]) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content)


class _Conversation:
    """Chat messages built item by item; assistant pieces in a row merge into one message."""

    def __init__(self, calls: set[str]):
        self.messages: list[dict] = []
        self.calls = calls
        self.open: dict | None = None          # the assistant message still taking pieces

    def _assistant(self) -> dict:
        if self.open is None:
            self.open = {"role": "assistant", "content": ""}
            self.messages.append(self.open)
        return self.open

    def _call(self, call_id: str, name: str, arguments: str) -> None:
        self.calls.add(call_id)
        self._assistant().setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}})

    def add(self, item, at: str) -> None:
        if isinstance(item, ReasoningItem):
            text = "".join(p.get("text", "") for p in (item.content or item.summary or [])
                           if isinstance(p.get("text"), str))
            msg = self._assistant()
            if msg["content"] or msg.get("tool_calls"):
                self.open = None
                msg = self._assistant()
            msg["reasoning_content"] = msg.get("reasoning_content", "") + text
        elif isinstance(item, FunctionCallItem):
            self._call(item.call_id, item.name, item.arguments)
        elif isinstance(item, CustomCallItem):
            self._call(item.call_id, item.name, json.dumps({"input": item.input}))
        elif isinstance(item, CallOutputItem):
            if item.call_id not in self.calls:
                raise InvalidRequest(f"'{at}.call_id' is {item.call_id!r}, which no earlier "
                                     "function_call has", param="input")
            self.open = None
            self.messages.append({"role": "tool", "tool_call_id": item.call_id,
                                  "content": _text(_parts(item.output, at))})
        elif item.role == "assistant":
            msg = self._assistant()
            if msg["content"] or msg.get("tool_calls"):
                self.open = None
                msg = self._assistant()
            msg["content"] = _text(_parts(item.content, at))
        else:
            self.open = None
            role = "system" if item.role == "developer" else item.role
            self.messages.append({"role": role, "content": _parts(item.content, at)})


def input_messages(wire: InputFields, calls: set[str]) -> list[dict]:
    """The request's own input as chat messages. ``calls``: the call ids the conversation
    already holds (a previous response's); the input's calls are added to it."""
    if wire.input is None:
        return []
    if isinstance(wire.input, str):
        return [{"role": "user", "content": wire.input}]
    conv = _Conversation(calls)
    for i, item in enumerate(wire.input):
        conv.add(item, f"input[{i}]")
    return conv.messages


def history_calls(messages: list[dict]) -> set[str]:
    """Every tool call id a chat conversation holds."""
    return {c["id"] for m in messages for c in m.get("tool_calls") or () if "id" in c}


# ------------------------------------------------------------------ tools and format

def _choice(choice, names: list[str]) -> tuple[Any, list[str] | None]:
    """(the chat tool_choice, the function names it keeps or None for all)."""
    if choice is None or isinstance(choice, str):
        return choice or "auto", None
    if choice.type == "function":
        if not choice.name or choice.name not in names:
            raise InvalidRequest(f"'tool_choice' names {choice.name!r}, which is not a "
                                 "function in 'tools'", param="tool_choice")
        return {"type": "function", "function": {"name": choice.name}}, None
    if choice.type == "allowed_tools":
        kept = [t.get("name") for t in choice.tools or () if t.get("type") == "function"]
        return choice.mode or "auto", [n for n in kept if n in names]
    raise InvalidRequest(f"'tool_choice' names a {choice.type} tool, which this server does "
                         "not run; only function tools are called", param="tool_choice")


def tool_fields(wire: InputFields) -> tuple[dict, list[str]]:
    """The chat body's tools and tool_choice, and the tool types skipped (see the module)."""
    functions: list[dict] = []
    ignored: list[str] = []
    for k, t in enumerate(wire.tools or ()):
        if t.type != "function":
            ignored.append(t.type)
            continue
        if not t.name:
            raise InvalidRequest(f"'tools[{k}].name' is required for a function tool",
                                 param="tools")
        functions.append({"type": "function", "function": {
            "name": t.name, "description": t.description or "",
            "parameters": t.parameters or {"type": "object", "properties": {}}}})
    choice, kept = _choice(wire.tool_choice, [f["function"]["name"] for f in functions])
    if kept is not None:
        functions = [f for f in functions if f["function"]["name"] in kept]
    if not functions:
        if choice not in ("auto", "none"):
            raise InvalidRequest("'tool_choice' needs a function tool in 'tools'",
                                 param="tool_choice")
        return {}, ignored
    return {"tools": functions, "tool_choice": choice}, ignored


def format_field(text: TextParam | None) -> dict:
    """text.format as the chat body's response_format (nothing for plain text)."""
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return {}
    if fmt.type == "json_object":
        return {"response_format": {"type": "json_object"}}
    if fmt.schema_ is None:
        raise InvalidRequest("'text.format.schema' is required for json_schema", param="text")
    spec: dict = {"name": fmt.name or "output", "schema": fmt.schema_}
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"response_format": {"type": "json_schema", "json_schema": spec}}


# ------------------------------------------------------------------ the chat body

def _refuse_unserved(wire: InputFields) -> None:
    if wire.conversation is not None:
        raise InvalidRequest("'conversation' (the Conversations API) is not served here; "
                             "continue with previous_response_id", param="conversation")
    if isinstance(wire, ResponsesBody) and wire.background:
        raise InvalidRequest("'background' responses are not served here; stream instead",
                             param="background")


def chat_body(wire: InputFields, history: list[dict]) -> tuple[dict, list[dict], list[str]]:
    """(the chat body, the new input as chat messages, the ignored tool types) for ``wire``
    continuing ``history`` (a stored conversation's messages, [] for none)."""
    _refuse_unserved(wire)
    new = input_messages(wire, history_calls(history))
    if not history and not new:
        raise InvalidRequest("'input' is required (a string or input items)", param="input")
    system = [{"role": "system", "content": wire.instructions}] if wire.instructions else []
    tools, ignored = tool_fields(wire)
    chat: dict = {"model": wire.model, "messages": system + history + new,
                  **tools, **format_field(wire.text)}
    effort = wire.reasoning.effort if wire.reasoning is not None else None
    if effort is not None:
        chat["reasoning_effort"] = EFFORTS[effort]
    return chat, new, ignored


def to_chat_body(wire: ResponsesBody, history: list[dict]
                 ) -> tuple[dict, list[dict], list[str]]:
    """``chat_body`` plus the sampling fields of a create request."""
    chat, new, ignored = chat_body(wire, history)
    chat["stream"] = bool(wire.stream)
    if wire.prompt_cache_key is not None:       # its instructions are a cached prefix
        chat["prompt_cache_key"] = wire.prompt_cache_key
    for key, value in (("max_tokens", wire.max_output_tokens),
                       ("temperature", wire.temperature), ("top_p", wire.top_p)):
        if value is not None:
            chat[key] = value
    return chat, new, ignored
