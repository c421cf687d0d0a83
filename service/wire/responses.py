"""The Responses dialect's request bodies (POST /v1/responses and /v1/responses/input_tokens),
declared once: `ResponsesBody` and `InputTokensBody`, with the input items, content parts,
tools, tool choices, reasoning and text-format objects they hold. Items and parts are
`Loose`: their other fields (id, status, annotations...) ride along. How a body becomes the
chat request the inference layer runs is `wire.responses_in`.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from hypnos.service.wire.model import Says, Wire, refuse, validate

I31 = 1 << 31
EFFORTS = {"none": "none", "minimal": "minimal", "low": "low", "medium": "medium",
           "high": "high", "xhigh": "high"}
ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning",
              "custom_tool_call", "custom_tool_call_output")


class Loose(Wire):
    """An item or part whose other fields (id, status, annotations...) ride along."""
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


class InputText(Loose):
    type: Literal["input_text", "output_text"]
    text: str


class InputImage(Loose):
    """An image by URL or data: URI. File ids are not served: the document says
    ``image_url`` is required, and the converter refuses a part without one, naming it."""
    model_config = ConfigDict(extra="allow", strict=True, frozen=True, json_schema_extra=lambda s: (
        s.update(required=["type", "image_url"]),
        s["properties"].update(image_url={"type": "string", "minLength": 1})))
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class Refusal(Loose):
    type: Literal["refusal"]
    refusal: str


class InputFile(Loose):
    """Not read here (the converter refuses it, pointing at /v1/documents/convert): the
    document states that no input_file part is accepted."""
    model_config = ConfigDict(extra="allow", strict=True, frozen=True, json_schema_extra=lambda s: (
        s.clear(), s.update({"not": {}, "description": "input_file parts are not read by this "
                             "server; convert the file with /v1/documents/convert"})))
    type: Literal["input_file"]


Part = Annotated[InputText | InputImage | Refusal | InputFile, Field(discriminator="type")]


class MessageItem(Loose):
    type: Literal["message"] = "message"
    role: Annotated[Literal["user", "assistant", "system", "developer"], Says(
        "'{at}' must be \"user\", \"assistant\", \"system\" or \"developer\"", param="input")]
    content: Annotated[str | list[Part], Says(
        "'{at}' must be a string or an array of content parts (input_text, input_image, "
        "output_text)", param="input")]


class FunctionCallItem(Loose):
    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str


class CustomCallItem(Loose):
    type: Literal["custom_tool_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    input: str


class CallOutputItem(Loose):
    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: str | list[Part]


class ReasoningItem(Loose):
    type: Literal["reasoning"]
    summary: list[dict[str, Any]] | None = None
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None


def _item_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("type", "message")
        return kind if kind in ITEM_TYPES else None
    return None


Item = Annotated[
    Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[CallOutputItem, Tag("function_call_output")]
    | Annotated[CallOutputItem, Tag("custom_tool_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[CustomCallItem, Tag("custom_tool_call")],
    Discriminator(_item_tag),
    Says("'{at}' must be an input item: a message (role, content), function_call, "
         "function_call_output, reasoning, custom_tool_call or custom_tool_call_output",
         param="input")]


class ToolParam(Loose):
    type: Annotated[str, Field(min_length=1)]
    name: str | None = None
    description: str | None = None
    parameters: Annotated[dict[str, Any], Says("'{at}' must be a JSON schema object",
                                               param="tools")] | None = None
    strict: bool | None = None


class ToolChoiceObject(Loose):
    """A function by name (which `tools` must hold), or the allowed_tools form."""
    model_config = ConfigDict(extra="allow", strict=True, frozen=True, json_schema_extra={
        "anyOf": [{"properties": {"type": {"const": "allowed_tools"}}},
                  {"required": ["name"], "properties": {"type": {"const": "function"},
                                                        "name": {"type": "string",
                                                                 "minLength": 1}}}]})
    type: Annotated[Literal["function", "allowed_tools"], Says(
        "'tool_choice' names a {got} tool, which this server does not run; only function "
        "tools are called", param="tool_choice")]
    name: str | None = None
    mode: Literal["auto", "required"] | None = None
    tools: list[dict[str, Any]] | None = None


class ReasoningParam(Loose):
    effort: Annotated[Literal["none", "minimal", "low", "medium", "high", "xhigh"], Says(
        "'reasoning.effort' must be none, minimal, low, medium, high or xhigh, got {got}",
        param="reasoning")] | None = None
    summary: str | None = None


class TextFormat(Loose):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    strict: bool | None = None
    description: str | None = None


class TextParam(Loose):
    format: Annotated[TextFormat, Says(
        "'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
        "{\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}", param="text")] \
        | None = None
    verbosity: str | None = None


class InputFields(Wire):
    """What /v1/responses and /v1/responses/input_tokens share: the model and the prompt
    (``input``, or a ``previous_response_id`` to continue, or both)."""
    # Either one present and not null (null counts as absent).
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in ("input", "previous_response_id")]})
    model: Annotated[str, Field(min_length=1), Says("'model' is required and must be a string")]
    input: Annotated[str | Annotated[list[Item], Field(min_length=1)], Says(
        "'input' must be a string or a non-empty array of input items")] | None = None
    instructions: Annotated[str, Says("'instructions' must be a string")] | None = None
    previous_response_id: Annotated[str, Field(min_length=1), Says(
        "'previous_response_id' must be a response id")] | None = None
    tools: Annotated[list[ToolParam], Says(
        "'tools' must be an array of tools, each with a 'type'")] | None = None
    tool_choice: Annotated[
        Literal["auto", "none", "required"] | ToolChoiceObject, Says(
            "'tool_choice' must be auto, none, required or {\"type\": \"function\", "
            "\"name\": ...}")] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    conversation: Any = None

    @model_validator(mode="after")
    def _input_or_previous(self) -> InputFields:
        if self.input is None and self.previous_response_id is None:
            raise refuse("'input' is required (a string or input items) unless "
                         "'previous_response_id' continues a stored response", param="input")
        return self


class ResponsesBody(InputFields):
    max_output_tokens: Annotated[int, Field(ge=1, le=I31), Says(
        "'max_output_tokens' must be a positive integer")] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    metadata: Annotated[dict[str, str], Field(max_length=16), Says(
        "'metadata' must be an object of at most 16 string values")] | None = None
    store: Annotated[bool, Says("'store' must be a boolean")] | None = None
    stream: Annotated[bool, Says("'stream' must be a boolean")] | None = None
    # Background responses are not served: only false (or absent).
    background: Annotated[Literal[False], Says(
        "'background' responses are not served here; stream instead")] | None = None
    prompt_cache_key: str | None = None
    user: str | None = None


class InputTokensBody(InputFields):
    """input_tokens counts the prompt of a would-be request."""


def parse_body(body: dict) -> ResponsesBody:
    return validate(ResponsesBody, body)


def count_body(body: dict) -> InputTokensBody:
    return validate(InputTokensBody, body)
