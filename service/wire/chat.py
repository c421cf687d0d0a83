"""POST /v1/chat/completions (spec 7.1): the body declared once (`ChatBody`, with the
sampling fields /v1/completions shares in `Sampling`), and `parse_chat`, which validates it and
builds the `ChatParams` / `ChatRequest` the inference layer consumes. Every problem is a 400
naming the field; unknown fields are ignored; an optional field sent as null is absent."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator

from hypnos.engines.records import ChatRequest
from hypnos.planner.context import request_context, tokens_from_chars
from hypnos.engines.chat_format import EFFORT_BUDGETS, think_budget
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.errors import InvalidRequest
from hypnos.service.wire.model import Says, Wire, refuse, validate

ROLES = ("system", "user", "assistant", "tool", "developer")
# Context the server budgets per media part when it estimates num_ctx (spec 7.1).
IMAGE_TOKENS, AUDIO_TOKENS = 576, 1024


@dataclass
class ChatParams:
    model: str
    request: ChatRequest
    stream: bool
    prompt_chars: int
    media: dict            # part type -> count
    num_ctx: int | None
    prompt_tokens: int | None = None      # counted by the loaded model's tokenizer, when known
    n: int = 1
    n_status: str | None = None           # "capped_to_8" when more were asked for
    response_format_status: str | None = None
    include_usage: bool = False           # stream_options.include_usage
    extras: dict = field(default_factory=dict)

    def estimated_ctx(self) -> int:
        """Per-slot context this request needs: num_ctx, else prompt + media + max_tokens
        with a floor of 2048. The prompt is the tokenizer's count when the model is loaded,
        else about 4 characters a token."""
        if self.num_ctx:
            return self.num_ctx
        media = (self.media.get("image_url", 0) * IMAGE_TOKENS
                 + self.media.get("input_audio", 0) * AUDIO_TOKENS)
        prompt = (self.prompt_tokens if self.prompt_tokens is not None
                  else tokens_from_chars(self.prompt_chars))
        return request_context(prompt, self.request.max_tokens, media)


MAX_N = 8
MAX_STOPS = 4
MAX_TOP_LOGPROBS = 20
I31, I63 = 1 << 31, 1 << 63


def _int(low: int, high: int, says: str | None = None):
    meta: tuple = (Says(says),) if says else ()
    return Annotated[int, Field(ge=low, le=high), *meta] | None


def _num(low: float, high: float):
    return Annotated[float, Field(ge=low, le=high)] | None


# ------------------------------------------------------------------ the body

class PredictionPart(Wire):
    type: Literal["text"]
    text: str


class Prediction(Wire):
    """OpenAI Predicted Outputs: text the answer is expected to repeat, used as its draft."""
    type: Annotated[Literal["content"], Says("'prediction.type' must be \"content\"")]
    content: Annotated[str | list[PredictionPart], Says(
        "'prediction.content' must be a string or an array of text parts")]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class Sampling(Wire):
    """The fields /v1/chat/completions and /v1/completions share."""
    max_tokens: _int(1, I31) = None  # type: ignore[valid-type]
    max_completion_tokens: _int(1, I31) = None  # type: ignore[valid-type]
    temperature: _num(0, 2) = None  # type: ignore[valid-type]
    top_p: _num(0, 1) = None  # type: ignore[valid-type]
    top_k: _int(0, 1 << 20) = None  # type: ignore[valid-type]
    seed: _int(-I63, (1 << 64) - 1) = None  # type: ignore[valid-type]
    presence_penalty: _num(-2, 2) = None  # type: ignore[valid-type]
    frequency_penalty: _num(-2, 2) = None  # type: ignore[valid-type]
    repetition_penalty: _num(0, 10) = None  # type: ignore[valid-type]
    min_p: _num(0, 1) = None  # type: ignore[valid-type]
    stop: Annotated[str | Annotated[list[str], Field(max_length=MAX_STOPS)], Says(
        f"'stop' must be a string or an array of at most {MAX_STOPS} strings")] | None = None
    logit_bias: Annotated[
        dict[Annotated[str, Field(pattern=r"^\d+$")], Annotated[float, Field(ge=-100, le=100)]],
        Field(json_schema_extra={"additionalProperties": False}),
        Says("'logit_bias' must map token ids to numbers in -100..100")] | None = None
    n: _int(1, I31) = None  # type: ignore[valid-type]
    stream: Annotated[bool, Says("'stream' must be a boolean")] | None = None
    stream_options: Annotated[dict[str, Any], Says("'stream_options' must be an object")] \
        | None = None
    prediction: Annotated[Prediction, Says(
        "'prediction' must be {\"type\": \"content\", \"content\": ...}")] | None = None


class TextPart(Wire):
    type: Literal["text"]
    text: str


class ImagePart(Wire):
    type: Literal["image_url"]
    image_url: dict[str, Any] | str | None = None


class AudioPart(Wire):
    type: Literal["input_audio"]
    input_audio: dict[str, Any] | None = None


Part = Annotated[TextPart | ImagePart | AudioPart, Field(discriminator="type")]
Content = str | list[Part]
NOT_ASSISTANT = Annotated[None, Says("'{at}' must be an array on an assistant message",
                                     param="{at}")]


class ToolFunctionCall(Wire):
    name: str
    arguments: str | dict[str, Any] = ""


class ToolCall(Wire):
    function: ToolFunctionCall


class _Message(Wire):
    name: str | None = None
    tool_calls: NOT_ASSISTANT = None


class SystemMessage(_Message):
    role: Literal["system"]
    content: Content


class DeveloperMessage(_Message):
    role: Literal["developer"]
    content: Content


class UserMessage(_Message):
    role: Literal["user"]
    content: Content


class ToolMessage(_Message):
    role: Literal["tool"]
    content: Content
    tool_call_id: str | None = None


class AssistantMessage(Wire):
    """``content`` may be null or left out when ``tool_calls`` holds calls."""
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["content"]},
        {"required": ["tool_calls"],
         "properties": {"tool_calls": {"type": "array", "minItems": 1}}}]})
    role: Literal["assistant"]
    name: str | None = None
    content: Content | None = None
    tool_calls: Annotated[
        list[Annotated[ToolCall, Says("'{at}' must hold a function with a name and arguments",
                                      param="{at}")]],
        Says("'{at}' must be an array on an assistant message", param="{at}")] | None = None

    @model_validator(mode="after")
    def _content_or_calls(self) -> AssistantMessage:
        if "content" not in self.model_fields_set and not self.tool_calls:
            raise refuse("'{at}.content' is required")
        return self


Message = Annotated[SystemMessage | DeveloperMessage | UserMessage | ToolMessage
                    | AssistantMessage, Field(discriminator="role")]


class FunctionSpec(Wire):
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    parameters: Annotated[dict[str, Any], Says("'{at}' must be a JSON schema object",
                                               param="{at}")] | None = None


class Tool(Wire):
    type: Literal["function"] = "function"
    function: FunctionSpec


class FunctionName(Wire):
    name: str


class ToolChoiceFunction(Wire):
    type: Literal["function"] = "function"
    function: FunctionName


class ResponseFormat(Wire):
    model_config = ConfigDict(extra="allow")
    type: str


class ChatBody(Sampling):
    model: Annotated[str, Field(min_length=1), Says("'model' is required and must be a string")]
    messages: Annotated[list[Message], Field(min_length=1)]
    tools: list[Annotated[Tool, Says("'{at}' must be {\"type\": \"function\", "
                                     "\"function\": {\"name\": ...}}", param="{at}")]] \
        | None = None
    tool_choice: Annotated[
        Literal["auto", "none", "required"]
        | Annotated[ToolChoiceFunction, Says(
            "'tool_choice' object must be {\"type\": \"function\", \"function\": "
            "{\"name\": ...}}")],
        Says("'tool_choice' must be auto, none, required or a function object, got {got}")] \
        | None = None
    # The legacy form: each entry is checked as a tool's function once converted, so the
    # document states that shape.
    functions: Annotated[list[Annotated[dict[str, Any], WithJsonSchema(
        FunctionSpec.model_json_schema())]], Says("'functions' must be an array")] | None = None
    function_call: Literal["auto", "none", "required"] | Annotated[dict[str, Any], WithJsonSchema({
        "type": "object", "required": ["name"],
        "properties": {"name": {"type": "string"}}})] | None = None
    logprobs: Annotated[bool, Says("'logprobs' must be a boolean")] | None = None
    top_logprobs: _int(0, I31) = None  # type: ignore[valid-type]
    num_ctx: _int(1, 1 << 22) = None  # type: ignore[valid-type]
    response_format: Annotated[ResponseFormat, Says(
        "'response_format' must be an object with a 'type'")] | None = None
    think: Annotated[bool, Says("'think' must be a boolean")] | None = None
    enable_thinking: Annotated[bool, Says("'think' must be a boolean", param="think")] \
        | None = None
    reasoning_effort: Annotated[Literal["none", "minimal", "low", "medium", "high"], Says(
        f"'reasoning_effort' must be one of {', '.join(EFFORT_BUDGETS)}, got {{got}}")] \
        | None = None
    reasoning_budget: _int(-I31, I31) = None  # type: ignore[valid-type]
    max_reasoning_tokens: _int(-I31, I31) = None  # type: ignore[valid-type]
    session_id: str | None = None
    prompt_cache_key: str | None = None


# ------------------------------------------------------------------ the typed request

def _content_chars(content, media: dict) -> int:
    if content is None or isinstance(content, str):
        return len(content or "")
    chars = 0
    for part in content:
        if isinstance(part, TextPart):
            chars += len(part.text)
        else:
            media[part.type] = media.get(part.type, 0) + 1
    return chars


def _tools(wire: ChatBody, body: dict) -> tuple[list[dict] | None, str]:
    """``tools`` and ``tool_choice`` (as "auto", "none", "required" or a function name),
    with the legacy ``functions`` / ``function_call`` converted (Fermion)."""
    tools = body.get("tools")
    choice: Any = wire.tool_choice if "tool_choice" in body else "auto"
    if tools is None and wire.functions is not None:
        tools = [{"type": "function", "function": f} for f in wire.functions]
        checked = validate(ChatBody, {"model": wire.model, "messages": body["messages"],
                                      "tools": tools})
        legacy = wire.function_call if wire.function_call is not None else "auto"
        choice = (ToolChoiceFunction(function=FunctionName(name=legacy.get("name")))
                  if isinstance(legacy, dict) and isinstance(legacy.get("name"), str)
                  else legacy)
        if isinstance(legacy, dict) and not isinstance(legacy.get("name"), str):
            raise InvalidRequest("'tool_choice' object must be {\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}", param="tool_choice")
        names = [t.function.name for t in checked.tools or ()]
    else:
        names = [t.function.name for t in wire.tools or ()]
    if tools is None:
        if choice not in ("auto", "none", None):
            raise InvalidRequest("'tool_choice' needs 'tools'", param="tool_choice")
        return None, "none"
    if choice is None:
        choice = "auto"
    if isinstance(choice, ToolChoiceFunction):
        name = choice.function.name
        if name not in names:
            raise InvalidRequest(f"'tool_choice' names {name!r}, which is not in 'tools'",
                                 param="tool_choice")
        choice = name
    elif choice not in ("auto", "none", "required"):
        raise InvalidRequest("'tool_choice' must be auto, none, required or a function "
                             f"object, got {choice!r}", param="tool_choice")
    return (tools or None), (choice if tools else "none")


def _thinking(wire: ChatBody, body: dict) -> int | None:
    think = wire.think if "think" in body else wire.enable_thinking
    budget = wire.reasoning_budget if "reasoning_budget" in body else wire.max_reasoning_tokens
    return think_budget(think, wire.reasoning_effort, budget)


def parse_sampling(wire: Sampling, limits: LimitsConfig, default_max_tokens: int = 512) -> dict:
    """The fields /v1/chat/completions and /v1/completions share, as ChatRequest keywords."""
    max_tokens = wire.max_tokens if wire.max_tokens is not None else wire.max_completion_tokens
    stop = [wire.stop] if isinstance(wire.stop, str) else list(wire.stop or ())
    return dict(
        max_tokens=min(max_tokens or default_max_tokens, limits.max_tokens_cap),
        temperature=wire.temperature, top_p=wire.top_p, top_k=wire.top_k, seed=wire.seed,
        presence_penalty=wire.presence_penalty, frequency_penalty=wire.frequency_penalty,
        repetition_penalty=wire.repetition_penalty, min_p=wire.min_p,
        stop=[x for x in stop if x],
        logit_bias=None if wire.logit_bias is None else {
            int(k): float(v) for k, v in wire.logit_bias.items()},
        repetition_bound=limits.repetition_loop_tokens,
        prediction=wire.prediction.text() if wire.prediction is not None else None)


def parse_n(wire: Sampling) -> tuple[int, str | None]:
    n = wire.n or 1
    return (MAX_N, "capped_to_8") if n > MAX_N else (n, None)


def parse_stream(wire: Sampling) -> tuple[bool, bool]:
    return bool(wire.stream), bool((wire.stream_options or {}).get("include_usage"))


def instructions_mark(messages: list[dict]) -> tuple[int, ...]:
    """The cache mark of a conversation named by ``prompt_cache_key``: the end of its leading
    system and developer messages (an agent's instructions, the tools rendered beside them),
    the prefix its every session shares; none without them."""
    n = 0
    while n < len(messages) and isinstance(messages[n], dict) and \
            messages[n].get("role") in ("system", "developer"):
        n += 1
    return (n - 1,) if n else ()


def parse_chat(body: dict, limits: LimitsConfig) -> ChatParams:
    wire = validate(ChatBody, body)
    media: dict = {}
    chars = sum(_content_chars(m.content, media) for m in wire.messages)
    if chars > limits.max_prompt_chars:
        raise InvalidRequest(f"The messages hold {chars} characters, above max_prompt_chars "
                             f"({limits.max_prompt_chars})", param="messages")
    stream, include_usage = parse_stream(wire)
    tools, tool_choice = _tools(wire, body)
    top = wire.top_logprobs or 0
    # The engine builds the grammar (llama.cpp's converter) and reports how it applied it:
    # it reads the body's own object (json_schema and the rest ride along).
    format_status = None
    response_format = body.get("response_format") if wire.response_format is not None else None
    if response_format is not None and tools and tool_choice != "none":
        format_status, response_format = "ignored_tools_present", None
    n, n_status = parse_n(wire)
    req = ChatRequest(
        messages=body["messages"], num_ctx=wire.num_ctx,
        tools=tools, tool_choice=tool_choice, response_format=response_format,
        logprobs=bool(wire.logprobs), top_logprobs=min(top, MAX_TOP_LOGPROBS),
        think_budget=_thinking(wire, body), **parse_sampling(wire, limits),
        cache_marks=instructions_mark(body["messages"]) if wire.prompt_cache_key else ())
    return ChatParams(model=wire.model, request=req, stream=stream, prompt_chars=chars,
                      media=media, num_ctx=req.num_ctx, n=n, n_status=n_status,
                      response_format_status=format_status, include_usage=include_usage)
