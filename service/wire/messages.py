"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages dialect, declared
once (`MessagesBody`) and translated into the chat request the inference layer already runs
(`to_chat_body`), so a Messages call reaches every model through the same lease, scheduler,
telemetry, keys and request log as /v1/chat/completions.

The translation, block by block:

- ``system`` (a string or text blocks) becomes the first system message, without Claude
  Code's billing header (``billing_header_dropped``);
- ``text`` and ``image`` blocks (base64 or url sources) become OpenAI content parts, so an image
  takes the existing vision path;
- an assistant's ``tool_use`` blocks become ``tool_calls`` (the id kept), a user's
  ``tool_result`` blocks become ``tool`` messages answering that id (``is_error`` says so in
  the text); a ``tool_result`` naming no earlier ``tool_use`` is a 400;
- ``thinking`` blocks in history become the assistant message's ``reasoning_content``;
- ``tool_choice`` ``auto | any | tool | none`` becomes ``auto | required | {function} | none``;
- ``thinking: {type: enabled, budget_tokens}`` becomes the thinking budget, ``disabled`` turns
  thinking off, ``adaptive`` (Claude Code) and ``between_tools`` leave it to the model's
  template; ``output_config.effort`` becomes ``reasoning_effort`` (xhigh and max: high) and
  ``output_config.format`` (a JSON schema) the structured-output grammar.

``cache_control`` markers are not needed for reuse (the prefix cache reuses a prompt's
unchanged head without them); where they stand, a hybrid model's state is checkpointed
(``marked_chat_messages``), so a prompt parting after a mark re-reads only what follows it.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from hypnos.service.errors import InvalidRequest
from hypnos.service.wire.chat import MAX_STOPS
from hypnos.service.wire.model import Says, Wire, validate

I31 = 1 << 31
# output_config.effort -> the chat path's reasoning_effort.
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


class CacheControlled(Wire):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    cache_control: dict[str, Any] | None = None


class TextBlock(CacheControlled):
    type: Literal["text"]
    text: str


class Base64Source(Wire):
    type: Literal["base64"]
    media_type: Annotated[str, Field(min_length=1)]
    data: Annotated[str, Field(min_length=1)]


class UrlSource(Wire):
    type: Literal["url"]
    url: Annotated[str, Field(min_length=1)]


class ImageBlock(CacheControlled):
    type: Literal["image"]
    source: Annotated[Annotated[Base64Source | UrlSource, Field(discriminator="type")], Says(
        "'{at}' must be {\"type\": \"base64\", \"media_type\": ..., \"data\": ...} or "
        "{\"type\": \"url\", \"url\": ...}", param="messages")]


class ToolUseBlock(CacheControlled):
    type: Literal["tool_use"]
    id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    input: dict[str, Any]


class ToolResultBlock(CacheControlled):
    type: Literal["tool_result"]
    tool_use_id: Annotated[str, Field(min_length=1)]
    content: str | list[TextBlock | ImageBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(CacheControlled):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(CacheControlled):
    type: Literal["redacted_thinking"]
    data: str | None = None


# What each role's turn may hold (the document states it; a block in the wrong turn is a
# 400 naming it).
UserBlock = Annotated[TextBlock | ImageBlock | ToolResultBlock, Field(discriminator="type")]
AssistantBlock = Annotated[TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock,
                           Field(discriminator="type")]
Block = UserBlock | AssistantBlock


class UserParam(Wire):
    """A user turn; ``system`` inside the conversation is Claude Code's mid-conversation
    system message (its ``mid-conversation-system`` beta): kept in place as a system
    message, holding what a user turn may."""
    role: Literal["user", "system"]
    content: Annotated[str | Annotated[list[UserBlock], Field(min_length=1)], Says(
        "'{at}' must be a string or an array of the blocks a user turn holds (text, image, "
        "tool_result)", param="messages")]


class AssistantParam(Wire):
    role: Literal["assistant"]
    content: Annotated[str | Annotated[list[AssistantBlock], Field(min_length=1)], Says(
        "'{at}' must be a string or an array of the blocks an assistant turn holds (text, "
        "tool_use, thinking, redacted_thinking)", param="messages")]


MessageParam = Annotated[UserParam | AssistantParam, Field(discriminator="role"), Says(
    "'{at}.role' must be \"user\", \"assistant\" or \"system\"", param="messages",
    on=("union_tag_invalid", "union_tag_not_found", "model_attributes_type", "model_type"))]


class ToolParam(Wire):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    input_schema: Annotated[dict[str, Any], Says("'{at}' must be a JSON schema object",
                                                 param="tools")] | None = None
    # Client tools only: a server tool (web_search_..., bash_..., a "type" of its own) is
    # refused, since this server does not run it.
    type: Annotated[Literal["custom"], Says(
        "'{at}' is a server tool ({got}), which this server does not run; send client tools "
        "with an input_schema", param="tools")] | None = None


class ToolChoiceParam(Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingParam(Wire):
    """``enabled`` needs ``budget_tokens``."""
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"properties": {"type": {"enum": ["disabled", "adaptive", "between_tools"]}}},
        {"required": ["budget_tokens"], "properties": {"type": {"const": "enabled"},
                                                       "budget_tokens": {"type": "integer"}}}]})
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: Annotated[int, Field(ge=0, le=I31)] | None = None


class OutputFormat(Wire):
    type: Literal["json_schema"]
    schema_: Annotated[dict[str, Any], Field(alias="schema")]


class OutputConfig(Wire):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: Annotated[OutputFormat, Says(
        "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}",
        param="output_config")] | None = None


class MessagesBody(Wire):
    model: Annotated[str, Field(min_length=1), Says("'model' is required and must be a string")]
    max_tokens: Annotated[int, Field(ge=1, le=I31), Says(
        "'max_tokens' is required and must be a positive integer")]
    messages: Annotated[list[MessageParam], Field(min_length=1), Says(
        "'messages' must be a non-empty array of messages", on=("too_short", "list_type",
                                                                "missing"))]
    system: Annotated[str | list[TextBlock], Says(
        "'system' must be a string or an array of text blocks")] | None = None
    stop_sequences: Annotated[list[str], Field(max_length=MAX_STOPS), Says(
        f"'stop_sequences' must be an array of at most {MAX_STOPS} strings")] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=0, le=1 << 20)] | None = None
    metadata: dict[str, Any] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: Annotated[ToolChoiceParam, Says(
        "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}, "
        "with 'name' for \"tool\"")] | None = None
    thinking: Annotated[ThinkingParam, Says(
        "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, "
        "{\"type\": \"disabled\"} or {\"type\": \"adaptive\"}")] | None = None
    output_config: OutputConfig | None = None
    stream: bool | None = None


class CountTokensBody(Wire):
    """count_tokens takes the request without max_tokens."""
    model: Annotated[str, Field(min_length=1), Says("'model' is required and must be a string")]
    messages: Annotated[list[MessageParam], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None


# ------------------------------------------------------------------ translation

#: How Claude Code's billing header starts: a first system block such as
#: ``x-anthropic-billing-header: cc_version=2.1.197.417; cc_entrypoint=sdk-cli;`` whose
#: values change with every prompt a few tokens in, so nothing after it would ever be reused
#: from the prefix cache. It means nothing to a local model.
BILLING_HEADER = "x-anthropic-billing-header:"


def billing_header_dropped(system: str | list[TextBlock] | None
                           ) -> str | list[TextBlock] | None:
    """``system`` without Claude Code's billing header: the text blocks that are one, or the
    first line of a string that starts with one. Anything else is returned as it is."""
    if isinstance(system, str):
        if not system.lstrip().startswith(BILLING_HEADER):
            return system
        _, _, rest = system.lstrip().partition("\n")
        return rest
    if system is None:
        return None
    return [b for b in system if not b.text.lstrip().startswith(BILLING_HEADER)]


def _text_of(blocks) -> str:
    if blocks is None:
        return ""
    if isinstance(blocks, str):
        return blocks
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def _image_part(block: ImageBlock) -> dict:
    src = block.source
    url = src.url if isinstance(src, UrlSource) else f"data:{src.media_type};base64,{src.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _user_messages(msg: UserParam, i: int, calls: set[str]) -> list[dict]:
    """One user turn: tool results first (each a tool message), then its text and images."""
    if isinstance(msg.content, str):
        return [{"role": "user", "content": msg.content}]
    out: list[dict] = []
    parts: list[dict] = []
    for j, block in enumerate(msg.content):
        at = f"messages[{i}].content[{j}]"
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id not in calls:
                raise InvalidRequest(f"'{at}.tool_use_id' is {block.tool_use_id!r}, which no "
                                     "earlier tool_use block has", param="messages")
            text = _text_of(block.content)
            if block.is_error:
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        else:
            parts.append(_image_part(block))
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _assistant_message(msg: AssistantParam, calls: set[str]) -> dict:
    if isinstance(msg.content, str):
        return {"role": "assistant", "content": msg.content}
    text, thinking, tool_calls = [], [], []
    for block in msg.content:
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ThinkingBlock):
            thinking.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            calls.add(block.id)
            tool_calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": json.dumps(block.input)}})
    out: dict = {"role": "assistant", "content": "".join(text)}
    if thinking:
        out["reasoning_content"] = "".join(thinking)
    if tool_calls:
        out["tool_calls"] = tool_calls
    return out


def _tool_fields(wire: MessagesBody | CountTokensBody) -> dict:
    if not wire.tools:
        if wire.tool_choice is not None and wire.tool_choice.type not in ("auto", "none"):
            raise InvalidRequest("'tool_choice' needs 'tools'", param="tool_choice")
        return {}
    tools = []
    for k, t in enumerate(wire.tools):
        if t.type not in (None, "custom"):
            raise InvalidRequest(f"'tools[{k}]' is a server tool ({t.type}), which this server "
                                 "does not run; send client tools with an input_schema",
                                 param="tools")
        tools.append({"type": "function", "function": {
            "name": t.name, "description": t.description or "",
            "parameters": t.input_schema or {"type": "object", "properties": {}}}})
    out: dict = {"tools": tools}
    choice = wire.tool_choice
    if choice is None or choice.type == "auto":
        out["tool_choice"] = "auto"
    elif choice.type == "any":
        out["tool_choice"] = "required"
    elif choice.type == "none":
        out["tool_choice"] = "none"
    else:
        if not choice.name:
            raise InvalidRequest("'tool_choice' of type \"tool\" needs a 'name'",
                                 param="tool_choice")
        out["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    return out


def _thinking_fields(thinking: ThinkingParam | None) -> dict:
    if thinking is None or thinking.type in ("adaptive", "between_tools"):
        return {}
    if thinking.type == "disabled":
        return {"think": False}
    if thinking.budget_tokens is None:
        raise InvalidRequest("'thinking.budget_tokens' is required when thinking is enabled",
                             param="thinking")
    return {"think": True, "reasoning_budget": thinking.budget_tokens}


def chat_messages(wire: MessagesBody | CountTokensBody) -> list[dict]:
    """The conversation as chat messages (system first)."""
    return marked_chat_messages(wire)[0]


def marked_chat_messages(wire: MessagesBody | CountTokensBody
                         ) -> tuple[list[dict], tuple[int, ...]]:
    """The conversation as chat messages (system first), and the cache marks: the index of
    each chat message that ends a block marked ``cache_control`` (a system block or a tool
    mark the system message; a message's block, the last chat message it became), where
    the engine keeps a checkpoint of a hybrid model's state (``ChatRequest.cache_marks``)."""
    out: list[dict] = []
    marks: list[int] = []
    system = _text_of(billing_header_dropped(wire.system))
    if system:
        out.append({"role": "system", "content": system})
        blocks = wire.system if isinstance(wire.system, list) else []
        if any(_marked(b) for b in [*blocks, *(wire.tools or ())]):
            marks.append(0)
    calls: set[str] = set()
    for i, msg in enumerate(wire.messages):
        if isinstance(msg, AssistantParam):
            out.append(_assistant_message(msg, calls))
        elif msg.role == "system":
            out.append({"role": "system", "content": _text_of(msg.content)})
        else:
            out.extend(_user_messages(msg, i, calls))
        if not isinstance(msg.content, str) and any(_marked(b) for b in msg.content):
            marks.append(len(out) - 1)
    return out, tuple(sorted(set(m for m in marks if m >= 0)))


def _marked(block: object) -> bool:
    return getattr(block, "cache_control", None) is not None


def to_chat_body(body: dict) -> tuple[MessagesBody, dict]:
    """The validated Messages body and the /v1/chat/completions body it becomes."""
    wire = validate(MessagesBody, body)
    chat: dict = {"model": wire.model, "messages": chat_messages(wire),
                  "max_tokens": wire.max_tokens, "stream": bool(wire.stream),
                  **_tool_fields(wire), **_thinking_fields(wire.thinking)}
    out = wire.output_config
    if out is not None and out.effort is not None:
        chat["reasoning_effort"] = EFFORTS[out.effort]
    if out is not None and out.format is not None:
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": out.format.schema_}}
    for key, value in (("temperature", wire.temperature), ("top_p", wire.top_p),
                       ("top_k", wire.top_k), ("stop", wire.stop_sequences)):
        if value is not None:
            chat[key] = value
    return wire, chat


def count_body(body: dict) -> dict:
    """count_tokens' body as a chat body (max_tokens is not part of the count)."""
    wire = validate(CountTokensBody, body)
    return {"model": wire.model, "messages": chat_messages(wire), "max_tokens": 1,
            **_tool_fields(wire), **_thinking_fields(wire.thinking)}
