"""Parse a POST /v1/chat/completions body into a typed request (spec 7.1). Every problem is
a 400 naming the field; unknown fields are ignored."""
from __future__ import annotations

from dataclasses import dataclass, field

from hypnos.engines.records import ChatRequest
from hypnos.planner.context import request_context, tokens_from_chars
from hypnos.engines.chat_format import EFFORT_BUDGETS, think_budget
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.http.errors import InvalidRequest

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


def _number(body: dict, name: str, low: float, high: float, integer: bool = False):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        raise InvalidRequest(f"'{name}' must be {kind}, got {value!r}", param=name)
    if not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be between {low} and {high}, got {value}",
                             param=name)
    return value


def _content_chars(content, where: str, media: dict) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if not isinstance(content, list):
        raise InvalidRequest(f"'{where}.content' must be a string, an array of parts or null")
    chars = 0
    for j, part in enumerate(content):
        key = f"{where}.content[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(f"'{key}' must be an object with a 'type'")
        kind = part["type"]
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise InvalidRequest(f"'{key}.text' must be a string")
            chars += len(part["text"])
        elif kind in ("image_url", "input_audio"):
            media[kind] = media.get(kind, 0) + 1
        else:
            raise InvalidRequest(f"'{key}.type' {kind!r} is not supported "
                                 "(text, image_url, input_audio)")
    return chars


def _messages(body: dict, media: dict) -> tuple[list[dict], int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    chars = 0
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise InvalidRequest(f"'{where}' must be an object")
        if m.get("role") not in ROLES:
            raise InvalidRequest(f"'{where}.role' must be one of system, user, assistant, "
                                 f"tool; got {m.get('role')!r}")
        if "content" not in m and not m.get("tool_calls"):
            raise InvalidRequest(f"'{where}.content' is required")
        if m.get("content") is None and m["role"] != "assistant":
            raise InvalidRequest(f"'{where}.content' may be null only on an assistant message")
        chars += _content_chars(m.get("content"), where, media)
        calls = m.get("tool_calls")
        if calls is not None:
            if m["role"] != "assistant" or not isinstance(calls, list):
                raise InvalidRequest(f"'{where}.tool_calls' must be an array on an assistant "
                                     "message", param=f"{where}.tool_calls")
            for j, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
                        or not isinstance(fn.get("arguments", ""), (str, dict)):
                    raise InvalidRequest(f"'{where}.tool_calls[{j}]' must hold a function with "
                                         "a name and arguments", param=f"{where}.tool_calls[{j}]")
    return messages, chars


MAX_N = 8
MAX_STOPS = 4
MAX_TOP_LOGPROBS = 20


def _tools(body: dict) -> tuple[list[dict] | None, str]:
    """``tools`` and ``tool_choice`` (as "auto", "none", "required" or a function name),
    with the legacy ``functions`` / ``function_call`` converted (Fermion)."""
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto")
    if tools is None and body.get("functions") is not None:
        functions = body["functions"]
        if not isinstance(functions, list):
            raise InvalidRequest("'functions' must be an array", param="functions")
        tools = [{"type": "function", "function": f} for f in functions]
        legacy = body.get("function_call", "auto")
        choice = ({"type": "function", "function": legacy}
                  if isinstance(legacy, dict) else legacy)
    if tools is None:
        if choice not in ("auto", "none", None):
            raise InvalidRequest("'tool_choice' needs 'tools'", param="tool_choice")
        return None, "none"
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    names = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" \
                or not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
                or not fn["name"]:
            raise InvalidRequest(f"'tools[{i}]' must be {{\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}", param=f"tools[{i}]")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest(f"'tools[{i}].function.parameters' must be a JSON schema "
                                 "object", param=f"tools[{i}].function.parameters")
        names.append(fn["name"])
    if choice is None:
        choice = "auto"
    if isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type", "function") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise InvalidRequest("'tool_choice' object must be {\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}", param="tool_choice")
        if name not in names:
            raise InvalidRequest(f"'tool_choice' names {name!r}, which is not in 'tools'",
                                 param="tool_choice")
        choice = name
    elif choice not in ("auto", "none", "required"):
        raise InvalidRequest("'tool_choice' must be auto, none, required or a function "
                             f"object, got {choice!r}", param="tool_choice")
    return (tools or None), (choice if tools else "none")


def _stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop):
        raise InvalidRequest("'stop' must be a string or an array of strings", param="stop")
    if len(stop) > MAX_STOPS:
        raise InvalidRequest(f"'stop' holds at most {MAX_STOPS} strings", param="stop")
    return [x for x in stop if x]


def _logit_bias(body: dict) -> dict[int, float] | None:
    bias = body.get("logit_bias")
    if bias is None:
        return None
    if not isinstance(bias, dict):
        raise InvalidRequest("'logit_bias' must map token ids to numbers", param="logit_bias")
    out = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise InvalidRequest(f"'logit_bias' key {key!r} is not a token id",
                                 param="logit_bias") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not -100 <= value <= 100 or token < 0:
            raise InvalidRequest(f"'logit_bias[{key}]' must be a number in -100..100",
                                 param="logit_bias")
        out[token] = float(value)
    return out


def _thinking(body: dict) -> int | None:
    think = body.get("think", body.get("enable_thinking"))
    if think is not None and not isinstance(think, bool):
        raise InvalidRequest("'think' must be a boolean", param="think")
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORT_BUDGETS:
        raise InvalidRequest(f"'reasoning_effort' must be one of {', '.join(EFFORT_BUDGETS)}, "
                             f"got {effort!r}", param="reasoning_effort")
    name = "reasoning_budget" if "reasoning_budget" in body else "max_reasoning_tokens"
    budget = _number(body, name, -(1 << 31), 1 << 31, integer=True)
    return think_budget(think, effort, budget)


def parse_sampling(body: dict, limits: LimitsConfig, default_max_tokens: int = 512) -> dict:
    """The fields /v1/chat/completions and /v1/completions share, as ChatRequest keywords."""
    max_tokens = _number(body, "max_tokens", 1, 1 << 31, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_completion_tokens", 1, 1 << 31, integer=True)
    return dict(
        max_tokens=min(max_tokens or default_max_tokens, limits.max_tokens_cap),
        temperature=_number(body, "temperature", 0, 2),
        top_p=_number(body, "top_p", 0, 1),
        top_k=_number(body, "top_k", 0, 1 << 20, integer=True),
        seed=_number(body, "seed", -(1 << 63), (1 << 64) - 1, integer=True),
        presence_penalty=_number(body, "presence_penalty", -2, 2),
        frequency_penalty=_number(body, "frequency_penalty", -2, 2),
        repetition_penalty=_number(body, "repetition_penalty", 0, 10),
        min_p=_number(body, "min_p", 0, 1),
        stop=_stop(body), logit_bias=_logit_bias(body),
        repetition_bound=limits.repetition_loop_tokens)


def parse_n(body: dict) -> tuple[int, str | None]:
    n = _number(body, "n", 1, 1 << 31, integer=True) or 1
    return (MAX_N, "capped_to_8") if n > MAX_N else (n, None)


def parse_stream(body: dict) -> tuple[bool, bool]:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InvalidRequest("'stream_options' must be an object", param="stream_options")
    return stream, bool(options.get("include_usage"))


def parse_chat(body: dict, limits: LimitsConfig) -> ChatParams:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required and must be a string", param="model")
    media: dict = {}
    messages, chars = _messages(body, media)
    if chars > limits.max_prompt_chars:
        raise InvalidRequest(f"The messages hold {chars} characters, above max_prompt_chars "
                             f"({limits.max_prompt_chars})", param="messages")
    stream, include_usage = parse_stream(body)
    tools, tool_choice = _tools(body)
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise InvalidRequest("'logprobs' must be a boolean", param="logprobs")
    top = _number(body, "top_logprobs", 0, 1 << 31, integer=True) or 0
    # The engine builds the grammar (llama.cpp's converter) and reports how it applied it.
    format_status = None
    response_format = body.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict) or not isinstance(
                response_format.get("type"), str):
            raise InvalidRequest("'response_format' must be an object with a 'type'",
                                 param="response_format")
        if tools and tool_choice != "none":
            format_status, response_format = "ignored_tools_present", None
    n, n_status = parse_n(body)
    req = ChatRequest(
        messages=messages, num_ctx=_number(body, "num_ctx", 1, 1 << 22, integer=True),
        tools=tools, tool_choice=tool_choice, response_format=response_format,
        logprobs=logprobs, top_logprobs=min(top, MAX_TOP_LOGPROBS),
        think_budget=_thinking(body), **parse_sampling(body, limits))
    return ChatParams(model=model, request=req, stream=stream, prompt_chars=chars, media=media,
                      num_ctx=req.num_ctx, n=n, n_status=n_status,
                      response_format_status=format_status, include_usage=include_usage)


# ------------------------------------------------------------------ the body's schema
# What parse_chat / parse_sampling accept, as JSON Schema: json_body enforces it and
# /openapi.json publishes it (service/http/openapi.py). Keep each range equal to the parser's.

def _int(low: int, high: int) -> dict:
    return {"type": "integer", "minimum": low, "maximum": high}


def _num(low: float, high: float) -> dict:
    return {"type": "number", "minimum": low, "maximum": high}


STRINGS = {"type": "array", "items": {"type": "string"}}
SAMPLING_SCHEMA = {
    "max_tokens": _int(1, 1 << 31), "max_completion_tokens": _int(1, 1 << 31),
    "temperature": _num(0, 2), "top_p": _num(0, 1), "top_k": _int(0, 1 << 20),
    "seed": _int(-(1 << 63), (1 << 64) - 1), "presence_penalty": _num(-2, 2),
    "frequency_penalty": _num(-2, 2), "repetition_penalty": _num(0, 10), "min_p": _num(0, 1),
    "stop": {"anyOf": [{"type": "string"}, {**STRINGS, "maxItems": MAX_STOPS}]},
    "logit_bias": {"type": "object"}, "n": _int(1, 1 << 31), "stream": {"type": "boolean"},
    "stream_options": {"type": "object"},
}
PART_SCHEMA = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["text", "image_url", "input_audio"]}, "text": {"type": "string"},
    "image_url": {"anyOf": [{"type": "object"}, {"type": "string"}]},
    "input_audio": {"type": "object"}}}
MESSAGE_SCHEMA = {"type": "object", "required": ["role"], "properties": {
    "role": {"enum": list(ROLES)},
    "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": PART_SCHEMA},
                          {"type": "null"}]},
    "tool_calls": {"type": "array"}, "tool_call_id": {"type": "string"},
    "name": {"type": "string"}}}
CHAT_SCHEMA = {"type": "object", "required": ["model", "messages"], "properties": {
    "model": {"type": "string", "minLength": 1},
    "messages": {"type": "array", "minItems": 1, "items": MESSAGE_SCHEMA},
    **SAMPLING_SCHEMA,
    "tools": {"type": "array", "items": {"type": "object"}},
    "tool_choice": {"anyOf": [{"type": "string"}, {"type": "object"}]},
    "functions": {"type": "array"}, "logprobs": {"type": "boolean"},
    "top_logprobs": _int(0, 1 << 31), "num_ctx": _int(1, 1 << 22),
    "response_format": {"type": "object", "required": ["type"],
                        "properties": {"type": {"type": "string"}}},
    "think": {"type": "boolean"}, "enable_thinking": {"type": "boolean"},
    "reasoning_effort": {"enum": list(EFFORT_BUDGETS)},
    "reasoning_budget": _int(-(1 << 31), 1 << 31),
    "max_reasoning_tokens": _int(-(1 << 31), 1 << 31),
    "session_id": {"type": "string"}, "prompt_cache_key": {"type": "string"}}}

