"""The client side of the Realtime protocol (GET /v1/realtime): a text frame as an event,
``session.update`` applied to the session's settings (the GA shape, ``session.audio.input``
and ``.output``, and the beta's flat fields: ``voice``, ``input_audio_format``, ``modalities``,
``input_audio_transcription``, ``turn_detection``, ``max_response_output_tokens``), the
audio formats (24 kHz pcm16, and G.711 mu-law / A-law at 8 kHz), the
conversation's items, and the chat body a response runs. Pure: every problem is an
`InvalidRequest` whose ``param`` is the event's dotted path, which the session answers as
an ``error`` event (the socket stays open).
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

from hypnos.service.errors import InvalidRequest

DEFAULT_INSTRUCTIONS = "You are a helpful voice assistant. Answer briefly, in plain sentences."
PCM, PCMU, PCMA = "audio/pcm", "audio/pcmu", "audio/pcma"
RATE = 24000
#: Samples a second of each format the session reads and writes (one channel).
FORMAT_RATES = {PCM: RATE, PCMU: 8000, PCMA: 8000}
BETA_FORMATS = {"pcm16": PCM, "g711_ulaw": PCMU, "g711_alaw": PCMA}
MAX_OUTPUT_TOKENS = 4096


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


@dataclass(frozen=True)
class Vad:
    """``turn_detection`` of type ``server_vad`` (``semantic_vad`` is read as it)."""
    threshold: float = 0.5
    silence_ms: int = 500
    prefix_ms: int = 300
    create_response: bool = True
    interrupt_response: bool = True

    def wire(self) -> dict:
        return {"type": "server_vad", "threshold": self.threshold,
                "silence_duration_ms": self.silence_ms, "prefix_padding_ms": self.prefix_ms,
                "create_response": self.create_response,
                "interrupt_response": self.interrupt_response}


@dataclass(frozen=True)
class Settings:
    """A session's settings (``session.update``) or one response's (``response.create``)."""
    instructions: str = DEFAULT_INSTRUCTIONS
    voice: str = "alloy"
    modalities: tuple[str, ...] = ("audio",)
    transcription: str | None = None        # the STT model; None: the pool's
    vad: Vad | None = field(default_factory=Vad)
    tools: tuple[dict, ...] = ()             # Realtime function tools, as sent
    tool_choice: str | dict = "auto"
    temperature: float | None = None
    max_output_tokens: int | None = None    # None: "inf"
    input_format: str = PCM                 # a key of FORMAT_RATES
    output_format: str = PCM

    def session_wire(self, model: str) -> dict:
        """The ``session`` object of session.created / session.updated (GA shape)."""
        return {
            "type": "realtime", "object": "realtime.session", "model": model,
            "instructions": self.instructions, "output_modalities": list(self.modalities),
            "audio": {
                "input": {"format": format_wire(self.input_format), "noise_reduction": None,
                          "transcription": {"model": self.transcription or "whisper"},
                          "turn_detection": self.vad.wire() if self.vad else None},
                "output": {"format": format_wire(self.output_format), "voice": self.voice,
                           "speed": 1.0}},
            "tools": [dict(t) for t in self.tools], "tool_choice": self.tool_choice,
            "max_output_tokens": self.max_output_tokens or "inf"}


def format_wire(kind: str) -> dict:
    """A format as the GA ``format`` object: pcm names its rate, G.711 has only its type."""
    return {"type": PCM, "rate": RATE} if kind == PCM else {"type": kind}


def bytes_per_ms(kind: str) -> float:
    """How many bytes of ``kind`` play for a millisecond (pcm16: two a sample)."""
    return FORMAT_RATES[kind] / 1000 * (2 if kind == PCM else 1)


# ------------------------------------------------------------------ small readers

def _obj(value: Any, at: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidRequest(f"'{at}' must be an object", param=at)
    return value


def _str(value: Any, at: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"'{at}' must be a string", param=at)
    return value


def _num(value: Any, at: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise InvalidRequest(f"'{at}' must be a number from {lo:g} to {hi:g}", param=at)
    return float(value)


def _int(value: Any, at: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidRequest(f"'{at}' must be an integer from {lo} to {hi}", param=at)
    return value


def parse_event(frame: str | bytes) -> dict:
    """A client frame as an event object with a string ``type``."""
    if isinstance(frame, (bytes, bytearray)):
        raise InvalidRequest("Binary frames are not part of the protocol; send audio as "
                             "input_audio_buffer.append events", param="type")
    try:
        event = json.loads(frame)
    except ValueError:
        raise InvalidRequest("The frame is not JSON", param="type") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise InvalidRequest("An event must be a JSON object with a string 'type'",
                             param="type")
    return event


# ------------------------------------------------------------------ session.update

def _format(value: Any, at: str) -> str:
    """A format's type: GA {"type": "audio/pcm", "rate": 24000}, {"type": "audio/pcmu"},
    {"type": "audio/pcma"}, or the beta's "pcm16", "g711_ulaw", "g711_alaw"."""
    if isinstance(value, str) and value in BETA_FORMATS:
        return BETA_FORMATS[value]
    kind = value.get("type") if isinstance(value, dict) else None
    if isinstance(kind, str) and kind in FORMAT_RATES and \
            value.get("rate", FORMAT_RATES[kind]) == FORMAT_RATES[kind]:
        return kind
    raise InvalidRequest(f"'{at}' must be {{\"type\": \"audio/pcm\", \"rate\": 24000}}, "
                         "{\"type\": \"audio/pcmu\"} or {\"type\": \"audio/pcma\"} (or the "
                         "beta's \"pcm16\", \"g711_ulaw\", \"g711_alaw\")", param=at)


def _vad(value: Any, at: str, now: Vad | None) -> Vad | None:
    if value is None:
        return None
    body = _obj(value, at)
    if body.get("type") not in ("server_vad", "semantic_vad"):
        raise InvalidRequest(f"'{at}.type' must be \"server_vad\" (or null to turn it off)",
                             param=f"{at}.type")
    v = now or Vad()
    readers = {"threshold": lambda x, p: _num(x, p, 0.0, 1.0),
               "silence_duration_ms": lambda x, p: _int(x, p, 100, 10000),
               "prefix_padding_ms": lambda x, p: _int(x, p, 0, 5000)}
    names = {"threshold": "threshold", "silence_duration_ms": "silence_ms",
             "prefix_padding_ms": "prefix_ms"}
    for key, read in readers.items():
        if body.get(key) is not None:
            v = replace(v, **{names[key]: read(body[key], f"{at}.{key}")})
    for key in ("create_response", "interrupt_response"):
        if body.get(key) is not None:
            if not isinstance(body[key], bool):
                raise InvalidRequest(f"'{at}.{key}' must be true or false", param=f"{at}.{key}")
            v = replace(v, **{key: body[key]})
    return v


def _tools(value: Any, at: str) -> tuple[dict, ...]:
    if not isinstance(value, list):
        raise InvalidRequest(f"'{at}' must be an array of function tools", param=at)
    out = []
    for i, tool in enumerate(value):
        t = _obj(tool, f"{at}[{i}]")
        if t.get("type", "function") != "function" or not isinstance(t.get("name"), str) \
                or not t["name"]:
            raise InvalidRequest(f"'{at}[{i}]' must be {{\"type\": \"function\", \"name\": "
                                 "..., \"parameters\": {...}}}", param=f"{at}[{i}]")
        if t.get("parameters") is not None:
            _obj(t["parameters"], f"{at}[{i}].parameters")
        out.append({"type": "function", "name": t["name"],
                    "description": t.get("description") or "",
                    "parameters": t.get("parameters") or {"type": "object", "properties": {}}})
    return tuple(out)


def _tool_choice(value: Any, at: str) -> str | dict:
    if value in ("auto", "none", "required"):
        return str(value)
    if isinstance(value, dict) and value.get("type") == "function" and \
            isinstance(value.get("name"), str) and value["name"]:
        return {"type": "function", "name": value["name"]}
    raise InvalidRequest(f"'{at}' must be \"auto\", \"none\", \"required\" or "
                         "{\"type\": \"function\", \"name\": ...}", param=at)


def _max_tokens(value: Any, at: str) -> int | None:
    if value == "inf":
        return None
    return _int(value, at, 1, MAX_OUTPUT_TOKENS)


def _modalities(value: Any, at: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or any(m not in ("text", "audio")
                                                      for m in value):
        raise InvalidRequest(f"'{at}' must be [\"audio\"] or [\"text\"]", param=at)
    return ("audio",) if "audio" in value else ("text",)


def apply_settings(now: Settings, body: dict, at: str) -> Settings:
    """``now`` with the fields ``body`` (a session or a response.create's response) sets;
    absent fields stay, the GA and the beta names both read."""
    s = now
    if body.get("instructions") is not None:
        s = replace(s, instructions=_str(body["instructions"], f"{at}.instructions"))
    for key in ("output_modalities", "modalities"):
        if body.get(key) is not None:
            s = replace(s, modalities=_modalities(body[key], f"{at}.{key}"))
    if body.get("voice") is not None:
        s = replace(s, voice=_str(body["voice"], f"{at}.voice"))
    for key, name in (("input_audio_format", "input_format"),
                      ("output_audio_format", "output_format")):
        if body.get(key) is not None:
            s = replace(s, **{name: _format(body[key], f"{at}.{key}")})
    if "turn_detection" in body:
        s = replace(s, vad=_vad(body["turn_detection"], f"{at}.turn_detection", s.vad))
    trans = body.get("input_audio_transcription")
    if trans is not None:
        model = _obj(trans, f"{at}.input_audio_transcription").get("model")
        s = replace(s, transcription=model if isinstance(model, str) and model else None)
    s = _apply_audio(s, body.get("audio"), f"{at}.audio")
    if body.get("tools") is not None:
        s = replace(s, tools=_tools(body["tools"], f"{at}.tools"))
    if body.get("tool_choice") is not None:
        s = replace(s, tool_choice=_tool_choice(body["tool_choice"], f"{at}.tool_choice"))
    if body.get("temperature") is not None:
        s = replace(s, temperature=_num(body["temperature"], f"{at}.temperature", 0.0, 2.0))
    for key in ("max_output_tokens", "max_response_output_tokens"):
        if body.get(key) is not None:
            s = replace(s, max_output_tokens=_max_tokens(body[key], f"{at}.{key}"))
    return s


def _apply_audio(s: Settings, audio: Any, at: str) -> Settings:
    """The GA ``audio.input`` / ``audio.output`` blocks."""
    if audio is None:
        return s
    audio = _obj(audio, at)
    inp = _obj(audio.get("input") or {}, f"{at}.input")
    out = _obj(audio.get("output") or {}, f"{at}.output")
    for block, name in ((inp, "input"), (out, "output")):
        if block.get("format") is not None:
            kind = _format(block["format"], f"{at}.{name}.format")
            s = replace(s, **{f"{name}_format": kind})
    if "turn_detection" in inp:
        s = replace(s, vad=_vad(inp["turn_detection"], f"{at}.input.turn_detection", s.vad))
    if inp.get("transcription") is not None:
        model = _obj(inp["transcription"], f"{at}.input.transcription").get("model")
        s = replace(s, transcription=model if isinstance(model, str) and model else None)
    if out.get("voice") is not None:
        s = replace(s, voice=_str(out["voice"], f"{at}.output.voice"))
    return s


# ------------------------------------------------------------------ items

def parse_item(value: Any, at: str = "item") -> dict:
    """A ``conversation.item.create`` item in its stored (server) shape, with an id: a
    ``message`` (system / user / assistant with text or audio parts; an audio part counts
    by its ``transcript``), a ``function_call`` or a ``function_call_output``."""
    item = _obj(value, at)
    kind = item.get("type", "message")
    item_id = item.get("id") if isinstance(item.get("id"), str) and item["id"] else \
        new_id("item")
    base = {"id": item_id, "object": "realtime.item", "status": "completed"}
    if kind == "function_call_output":
        return {**base, "type": kind, "call_id": _str(item.get("call_id"), f"{at}.call_id"),
                "output": _str(item.get("output"), f"{at}.output")}
    if kind == "function_call":
        return {**base, "type": kind, "name": _str(item.get("name"), f"{at}.name"),
                "call_id": item.get("call_id") or new_id("call"),
                "arguments": _str(item.get("arguments", "{}"), f"{at}.arguments")}
    if kind != "message":
        raise InvalidRequest(f"'{at}.type' must be message, function_call or "
                             "function_call_output", param=f"{at}.type")
    role = item.get("role")
    if role not in ("system", "user", "assistant"):
        raise InvalidRequest(f"'{at}.role' must be system, user or assistant",
                             param=f"{at}.role")
    parts = item.get("content")
    if not isinstance(parts, list):
        raise InvalidRequest(f"'{at}.content' must be an array of parts", param=f"{at}.content")
    return {**base, "type": "message", "role": role,
            "content": [_part(p, role, f"{at}.content[{i}]") for i, p in enumerate(parts)]}


_PART_TYPES = {"system": ("input_text",), "user": ("input_text", "input_audio"),
               "assistant": ("output_text", "output_audio", "text", "audio")}


def _part(value: Any, role: str, at: str) -> dict:
    part = _obj(value, at)
    kind = part.get("type")
    if kind not in _PART_TYPES[role]:
        raise InvalidRequest(f"'{at}.type' must be one of {', '.join(_PART_TYPES[role])} in a "
                             f"{role} message", param=f"{at}.type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "output_text" if role == "assistant" else kind,
                "text": _str(part.get("text", ""), f"{at}.text")}
    transcript = part.get("transcript")
    out = {"type": "output_audio" if role == "assistant" else "input_audio",
           "transcript": _str(transcript, f"{at}.transcript") if transcript is not None else ""}
    if role == "user" and part.get("audio") is not None:
        # base64 in the session's input format: the session transcribes it (``item_audio``)
        out["audio"] = _str(part["audio"], f"{at}.audio")
    return out


def item_audio(item: dict) -> tuple[int, str] | None:
    """(content index, base64 audio) of the one user ``input_audio`` part of a parsed
    ``item`` that carries audio and no transcript, taken out of the item (the session
    transcribes it; the item keeps the transcript); None when no part needs hearing. A
    part with a transcript says what its audio says, and its audio is dropped."""
    parts = item.get("content", [])
    carrying = [i for i, p in enumerate(parts) if "audio" in p]
    if len(carrying) > 1:
        raise InvalidRequest("A message item may carry audio in one input_audio part only",
                             param=f"item.content[{carrying[1]}].audio")
    if not carrying:
        return None
    at = carrying[0]
    audio = parts[at].pop("audio")
    return None if parts[at]["transcript"] else (at, audio)


def item_text(item: dict) -> str:
    """What a message item says, its audio parts by their transcripts."""
    return " ".join(p.get("text") or p.get("transcript") or "" for p in item.get("content", [])
                    if p.get("text") or p.get("transcript")).strip()


def chat_messages(instructions: str, items: list[dict]) -> list[dict]:
    """The conversation as chat messages: the instructions first, function calls as the
    assistant's tool calls, their outputs as tool messages."""
    out: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        kind = item["type"]
        if kind == "message":
            text = item_text(item)
            if text:
                out.append({"role": item["role"], "content": text})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": item["output"]})
    return out


def chat_body(model: str, s: Settings, items: list[dict]) -> dict:
    """The /v1/chat/completions body one response runs (parsed by `wire.chat.parse_chat`)."""
    body: dict = {"model": model, "stream": True,
                  "messages": chat_messages(s.instructions, items)}
    if s.tools and s.tool_choice != "none":
        body["tools"] = [{"type": "function", "function": {
            "name": t["name"], "description": t["description"],
            "parameters": t["parameters"]}} for t in s.tools]
        choice = s.tool_choice
        body["tool_choice"] = ({"type": "function", "function": {"name": choice["name"]}}
                               if isinstance(choice, dict) else choice)
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.max_output_tokens is not None:
        body["max_tokens"] = s.max_output_tokens
    return body
