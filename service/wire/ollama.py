"""Ollama's API (/api/*): the bodies declared once, and their translation into the requests
the inference layer already runs. ``/api/chat`` becomes a chat body (the same lease, tools,
grammars, thinking and vision as /v1/chat/completions), ``/api/generate`` a raw completion
(or a chat turn when ``system`` is sent without ``raw``), ``/api/embed`` an embeddings call.

``options`` map as Ollama documents them: ``num_predict`` → max_tokens (-1 or absent: the
server's default), ``num_ctx`` → the per-request context, ``temperature``, ``top_k``,
``top_p``, ``min_p``, ``seed``, ``stop``, ``repeat_penalty``. ``format`` is ``"json"`` (any
JSON object) or a JSON schema (the structured-output grammar); a schema the grammar cannot
express is a 400 naming ``format``, never a looser grammar (Ollama's answers have no field to
say it was loosened). ``keep_alive`` is parsed into
seconds (`keep_alive_secs`): the route applies it to the model's tier after the answer.
"""
from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema

from hypnos.engines.chat_format.grammar import InexpressibleSchema, schema_grammar
from hypnos.engines.records import ChatRequest
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.errors import InvalidRequest
from hypnos.service.wire.chat import MAX_STOPS, Sampling, Tool, parse_sampling
from hypnos.service.wire.model import Says, Wire, validate

# Go's time.ParseDuration, which Ollama reads keep_alive with: a sign, then one or more
# number+unit pairs ("1h30m", "1.5h", "250ms"); a bare number is seconds (as OLLAMA_KEEP_ALIVE
# reads one).
NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
GO_DURATION = re.compile(rf"([+-]?)((?:{NUMBER}(?:ns|us|µs|μs|ms|s|m|h))+)")
GO_PART = re.compile(rf"({NUMBER})(ns|us|µs|μs|ms|s|m|h)")
BARE_SECONDS = re.compile(rf"([+-]?)({NUMBER})")
UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
         "h": 3600.0}
KEEP_ALIVE_MAX_SECS = 365 * 86400.0   # a longer duration is refused (a negative one: forever)
KEEP_LOADED = -1.0                    # keep_alive_secs: any negative value, "keep it loaded"


class Options(Wire):
    num_predict: int | None = None
    num_ctx: Annotated[int, Field(ge=1, le=1 << 22)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    seed: int | None = None
    stop: Annotated[list[str], Field(max_length=MAX_STOPS), Says(
        f"'stop' must be an array of at most {MAX_STOPS} strings")] | None = None
    repeat_penalty: Annotated[float, Field(ge=0, le=10)] | None = None


class OllamaToolCall(Wire):
    function: dict[str, Any]


class OllamaMessage(Wire):
    role: Annotated[Literal["system", "user", "assistant", "tool"],
                    Says("'{at}' is {got}: system, user, assistant or tool", param="messages")]
    content: str | None = None
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    thinking: str | None = None
    tool_name: str | None = None


# "json", or a JSON schema of an object or array (the grammar checks the rest).
# The grammar's own limits are the one rule here a schema cannot state (a 400 naming format).
FormatSchema = Annotated[dict[str, Any], WithJsonSchema({
    "type": "object",
    "properties": {"type": {"enum": ["object", "array"]}, "properties": {"type": "object"},
                   "items": {"type": "object"}, "required": {"type": "array",
                                                             "items": {"type": "string"}}},
    "anyOf": [{"required": ["type"]}, {"required": ["properties"]}]})]
Format = Annotated[Literal["json", ""] | FormatSchema, Says(
    "'format' is {got}: \"json\" or a JSON schema object")]
Think = Annotated[bool | Literal["low", "medium", "high"], Says(
    "'think' must be true, false, \"low\", \"medium\" or \"high\"")]
# The document states the syntax and the numeric bound; a duration string over a year (say
# "9000h") is the one refusal it cannot state (bench/schemathesis.toml lists it).
DURATION = rf"^\s*[+-]?(?:{NUMBER}|(?:{NUMBER}(?:ns|us|µs|μs|ms|s|m|h))+)\s*$"
KeepAlive = Annotated[
    Annotated[str, Field(pattern=DURATION)]
    | Annotated[int, Field(le=365 * 86400)] | Annotated[float, Field(le=365 * 86400)],
    Says("'keep_alive' is {got}: a duration such as \"5m\", \"1h30m\" or a number of seconds, "
         "0 to unload at once, or a negative value to keep the model loaded; at most a year",
         param="keep_alive")]
Text = Annotated[str, Field(min_length=1)]


class ChatBody(Wire):
    model: Annotated[str, Field(min_length=1), Says("'model' is required")]
    messages: Annotated[list[OllamaMessage], Field(min_length=1),
                        Says("'messages' must be an array of at least one message",
                             on=("missing", "list_type", "too_short"))]
    tools: list[Tool] | None = None
    format: Format | None = None
    options: Annotated[Options, Says("'options' must be an object of model options "
                                     "(num_ctx, num_predict, temperature, ...)")] | None = None
    stream: bool | None = None
    keep_alive: KeepAlive | None = None
    think: Think | None = None


class GenerateBody(Wire):
    model: Annotated[str, Field(min_length=1), Says("'model' is required")]
    prompt: str | None = None
    # Fill in the middle is not served: only an empty suffix is accepted.
    suffix: Annotated[str, Field(max_length=0), Says(
        "'suffix' (fill in the middle) is not served")] | None = None
    system: str | None = None
    raw: bool | None = None
    images: list[str] | None = None
    format: Format | None = None
    options: Options | None = None
    stream: bool | None = None
    keep_alive: KeepAlive | None = None
    think: Think | None = None


class EmbedBody(Wire):
    """/api/embed: ``input``, one text or several, none empty."""
    model: Annotated[str, Field(min_length=1), Says("'model' is required")]
    input: Annotated[Text | Annotated[list[Text], Field(min_length=1)], Says(
        "'input' must be a non-empty string or array of non-empty strings")]
    keep_alive: KeepAlive | None = None
    truncate: bool | None = None

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EmbeddingsBody(Wire):
    """/api/embeddings (Ollama's older route): one non-empty ``prompt``."""
    model: Annotated[str, Field(min_length=1), Says("'model' is required")]
    prompt: Annotated[Text, Says("'prompt' must be a non-empty string")]
    keep_alive: KeepAlive | None = None

    @property
    def texts(self) -> list[str]:
        return [self.prompt]


class ModelBody(Wire):
    """/api/show, /api/pull, /api/delete: ``model`` (``name`` in older clients), one of them
    a non-empty string (the schema says so too)."""
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["model"], "properties": {"model": {"type": "string", "minLength": 1}}},
        {"required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}}]})
    model: str | None = None
    name: str | None = None
    stream: bool | None = None

    @property
    def id(self) -> str:
        value = self.model or self.name
        if not value:
            raise InvalidRequest("'model' is required", param="model")
        return value


def keep_alive_secs(value) -> float | None:
    """Seconds from Ollama's keep_alive: a number of seconds or a Go duration string.
    None: absent (the server's own tier policy); 0: demote once the answer is out;
    `KEEP_LOADED` for any negative value (keep the model loaded until told otherwise).
    Refused (400 naming keep_alive): anything else, non-finite numbers, and durations over
    `KEEP_ALIVE_MAX_SECS`."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        secs = float(value)
    elif isinstance(value, str):
        secs = _duration(value.strip())
    else:
        secs = math.nan
    if math.isnan(secs) or secs > KEEP_ALIVE_MAX_SECS or secs == -math.inf:
        raise InvalidRequest(
            f"'keep_alive' is {value!r}: a duration such as \"5m\", \"1h30m\" or a number "
            "of seconds, 0 to unload at once, or a negative value to keep the model loaded; "
            "at most a year", param="keep_alive")
    return KEEP_LOADED if secs < 0 else secs


def _duration(text: str) -> float:
    """A Go duration's (or a bare number's) seconds; NaN when ``text`` is neither."""
    if (m := BARE_SECONDS.fullmatch(text)) is not None:
        secs = float(m.group(2))
    elif (m := GO_DURATION.fullmatch(text)) is not None:
        secs = sum(float(n) * UNITS[unit] for n, unit in GO_PART.findall(m.group(2)))
    else:
        return math.nan
    return -secs if m.group(1) == "-" and secs else secs


def _sampling(options: Options | None) -> dict:
    if options is None:
        return {}
    out: dict = {}
    if options.num_predict is not None and options.num_predict > 0:
        out["max_tokens"] = options.num_predict
    for key in ("temperature", "top_k", "top_p", "min_p", "seed", "stop", "num_ctx"):
        value = getattr(options, key)
        if value is not None:
            out[key] = value
    if options.repeat_penalty is not None:
        out["repetition_penalty"] = options.repeat_penalty
    return out


def _format(value) -> dict:
    if value is None or value == "":
        return {}
    if value == "json":
        return {"response_format": {"type": "json_object"}}
    if isinstance(value, dict):
        if value.get("type") not in ("object", "array") and "properties" not in value:
            raise InvalidRequest("'format' must be \"json\" or a JSON schema of an object",
                                 param="format")
        _schema_grammar(value)
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "format", "schema": value}}}
    raise InvalidRequest(f"'format' is {value!r}: \"json\" or a JSON schema object",
                         param="format")


def _schema_grammar(schema: dict) -> str:
    try:
        return schema_grammar(schema)
    except InexpressibleSchema as exc:
        raise InvalidRequest(f"'format' is a JSON schema the answer's grammar cannot express "
                             f"({exc}); send a simpler schema or \"json\"",
                             param="format") from None


def format_grammar(value) -> str | None:
    """``format`` as the GBNF a raw prompt is constrained by (None: no format); the same
    refusals as on a chat turn."""
    rf = _format(value).get("response_format")
    if rf is None:
        return None
    return _schema_grammar(rf["json_schema"]["schema"] if rf["type"] == "json_schema"
                           else {"type": "object"})


def _think(value) -> dict:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"think": value}
    if value in ("low", "medium", "high"):
        return {"reasoning_effort": value}
    raise InvalidRequest("'think' must be true, false, \"low\", \"medium\" or \"high\"",
                         param="think")


def _image_parts(images: list[str] | None) -> list[dict]:
    return [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}}
            for b64 in images or ()]


def _chat_message(m: OllamaMessage, i: int) -> dict:
    """Message ``i`` as a chat message (its role was checked by the wire model)."""
    content: Any = m.content or ""
    if m.images:
        content = [{"type": "text", "text": m.content or ""}, *_image_parts(m.images)]
    out: dict = {"role": m.role, "content": content}
    if m.role == "assistant" and m.tool_calls:
        out["tool_calls"] = [{"id": f"call_{i}_{k}", "type": "function", "function": {
            "name": c.function.get("name", ""),
            "arguments": json.dumps(c.function.get("arguments") or {})}}
            for k, c in enumerate(m.tool_calls)]
    if m.role == "assistant" and m.thinking:
        out["reasoning_content"] = m.thinking
    return out


def chat_body(body: dict) -> tuple[ChatBody, dict]:
    """The validated /api/chat body and the /v1/chat/completions body it becomes."""
    wire = validate(ChatBody, body)
    chat: dict = {"model": wire.model, "stream": False,
                  "messages": [_chat_message(m, i) for i, m in enumerate(wire.messages)],
                  **_sampling(wire.options), **_format(wire.format), **_think(wire.think)}
    if wire.tools:
        chat["tools"] = [t.model_dump(exclude_none=True) for t in wire.tools]
    return wire, chat


def generate_chat_body(wire: GenerateBody) -> dict:
    """/api/generate as a chat turn (the prompt under the model's template, ``system``
    first), the default when ``raw`` is not set and the model has a template."""
    messages = ([{"role": "system", "content": wire.system}] if wire.system else []) + [
        {"role": "user", "content": ([{"type": "text", "text": wire.prompt or ""},
                                      *_image_parts(wire.images)]
                                     if wire.images else wire.prompt or "")}]
    return {"model": wire.model, "messages": messages, **_sampling(wire.options),
            **_format(wire.format), **_think(wire.think)}


def parse_generate(body: dict) -> GenerateBody:
    return validate(GenerateBody, body)


def raw_request(wire: GenerateBody, limits: LimitsConfig) -> ChatRequest:
    """``/api/generate``'s prompt as it is (no template, no ``system``), ``format`` as its
    grammar."""
    sampling = validate(Sampling, {k: v for k, v in generate_chat_body(wire).items()
                                   if k in Sampling.model_fields})
    return ChatRequest(messages=[], prompt=wire.prompt, grammar=format_grammar(wire.format),
                       **parse_sampling(sampling, limits))
