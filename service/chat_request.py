"""Parse a POST /v1/chat/completions body into a typed request (spec 7.1). Every problem is
a 400 naming the field; unknown fields are ignored."""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.engines.base import ChatRequest
from hypnos.service.config_schema import LimitsConfig
from hypnos.service.errors import InvalidRequest

ROLES = ("system", "user", "assistant", "tool", "developer")
# Context the server budgets per media part when it estimates num_ctx (spec 7.1).
IMAGE_TOKENS, AUDIO_TOKENS = 576, 1024
CTX_FLOOR = 2048


@dataclass
class ChatParams:
    model: str
    request: ChatRequest
    stream: bool
    prompt_chars: int
    media: dict            # part type -> count
    num_ctx: int | None
    tool_choice: object = "auto"
    prompt_tokens: int | None = None      # counted by the loaded model's tokenizer, when known

    def estimated_ctx(self) -> int:
        """Per-slot context this request needs: num_ctx, else prompt + media + max_tokens
        with a floor of 2048. The prompt is the tokenizer's count when the model is loaded,
        else about 4 characters a token."""
        if self.num_ctx:
            return self.num_ctx
        media = (self.media.get("image_url", 0) * IMAGE_TOKENS
                 + self.media.get("input_audio", 0) * AUDIO_TOKENS)
        prompt = self.prompt_tokens if self.prompt_tokens is not None else self.prompt_chars // 4
        return max(CTX_FLOOR, prompt + media + self.request.max_tokens)


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
    return messages, chars


def parse_chat(body: dict, limits: LimitsConfig) -> ChatParams:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required and must be a string", param="model")
    media: dict = {}
    messages, chars = _messages(body, media)
    if chars > limits.max_prompt_chars:
        raise InvalidRequest(f"The messages hold {chars} characters, above max_prompt_chars "
                             f"({limits.max_prompt_chars})", param="messages")
    max_tokens = _number(body, "max_tokens", 1, 1 << 31, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_completion_tokens", 1, 1 << 31, integer=True)
    max_tokens = min(max_tokens or 512, limits.max_tokens_cap)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    req = ChatRequest(
        messages=messages, max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0, 2),
        top_p=_number(body, "top_p", 0, 1),
        top_k=_number(body, "top_k", 0, 1 << 20, integer=True),
        seed=_number(body, "seed", -(1 << 63), (1 << 64) - 1, integer=True),
        num_ctx=_number(body, "num_ctx", 1, 1 << 22, integer=True),
        tools=tools or None,
        presence_penalty=_number(body, "presence_penalty", -2, 2),
        frequency_penalty=_number(body, "frequency_penalty", -2, 2),
        repetition_penalty=_number(body, "repetition_penalty", 0, 10),
        min_p=_number(body, "min_p", 0, 1))
    return ChatParams(model=model, request=req, stream=stream, prompt_chars=chars, media=media,
                      num_ctx=req.num_ctx, tool_choice=body.get("tool_choice", "auto"))
