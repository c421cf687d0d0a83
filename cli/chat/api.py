"""The HTTP side of ``hypnos chat``: the streamed chat completion as typed events, the
server's models, transcription and document conversion, and what to tell the user when the
server refuses or cannot be reached. The parsers and the advice are pure; the calls block
(each at most the client's timeout without a byte).
"""
from __future__ import annotations

import json
import mimetypes
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import click
import httpx

from hypnos.cli.client import Client, ServerSaidNo, Unreachable, error_of

CHAT_MODALITIES = ("text_generation", "vision")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "")


@dataclass(frozen=True)
class Delta:
    """A piece of the answer (``content``) or of the thoughts before it (``reasoning``)."""
    content: str = ""
    reasoning: str = ""


@dataclass(frozen=True)
class Finish:
    """The stream's last chunk: why it stopped, usage and hypnos_telemetry."""
    reason: str
    usage: dict = field(default_factory=dict)
    telemetry: dict = field(default_factory=dict)


class StreamFailed(click.ClickException):
    """The server failed after the stream started (finish_reason "error", spec 7.4)."""


def sse_payloads(lines: Iterable[str]) -> Iterator[dict]:
    """The JSON of each ``data:`` line until ``data: [DONE]``; comments and blank lines are
    skipped."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


def events_of(chunk: dict) -> list[Delta | Finish]:
    """The events in one chat.completion.chunk; raises StreamFailed on the error chunk."""
    choice = (chunk.get("choices") or [{}])[0]
    reason = choice.get("finish_reason")
    if reason == "error" or ("error" in chunk and not chunk.get("choices")):
        err = chunk.get("error") or {}
        raise StreamFailed(f"the server failed mid-answer: {err.get('message', 'no reason')}")
    delta = choice.get("delta") or {}
    out: list[Delta | Finish] = []
    if delta.get("reasoning_content") or delta.get("content"):
        out.append(Delta(content=delta.get("content") or "",
                         reasoning=delta.get("reasoning_content") or ""))
    if reason:
        out.append(Finish(reason, chunk.get("usage") or {}, chunk.get("hypnos_telemetry") or {}))
    return out


def stream_chat(client: Client, body: dict) -> Generator[Delta | Finish, None, None]:
    """POST /v1/chat/completions with ``stream`` and yield its events. Closing the iterator
    (or an exception in the consumer) closes the connection, which cancels the generation.
    Raises ServerSaidNo for an error status, Unreachable when no connection is made."""
    try:
        with httpx.stream("POST", client.base + "/v1/chat/completions", json=body,
                          headers=client.headers(), timeout=client.timeout) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise error_of(resp)
            for chunk in sse_payloads(resp.iter_lines()):
                yield from events_of(chunk)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
        raise Unreachable(f"cannot reach the server at {client.base}: {exc}") from None
    except httpx.TimeoutException:
        raise click.ClickException(f"no answer from {client.base} within "
                                   f"{client.timeout:g} s") from None
    except httpx.TransportError as exc:
        raise Unreachable(f"lost the connection to {client.base}: {exc}") from None


# ------------------------------------------------------------------------ models

def chat_models(status: dict) -> list[dict]:
    """The enabled models of a /v1/memory/status body that answer chat completions."""
    return [m for m in status.get("models", []) if m.get("enabled", True)
            and set(m.get("modalities") or [m.get("modality")]) & set(CHAT_MODALITIES)]


def serves(model: dict, modality: str) -> bool:
    return modality in (model.get("modalities") or [model.get("modality")])


def model_for(status: dict, modality: str) -> str | None:
    """The model to send ``modality`` work to: one whose primary modality it is first (a
    dedicated Whisper before a chat model that also transcribes), else any serving it."""
    models = [m for m in status.get("models", []) if m.get("enabled", True)
              and serves(m, modality)]
    models.sort(key=lambda m: m.get("modality") != modality)
    return models[0]["id"] if models else None


def default_model(status: dict) -> str | None:
    """The chat model to start with: one already in tier 1, else the first listed."""
    models = chat_models(status)
    models.sort(key=lambda m: m.get("current_tier") != "tier1_gpu_vram")
    return models[0]["id"] if models else None


# ------------------------------------------------------------------------ media routes

def _upload(path: Path) -> tuple[str, bytes, str]:
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return path.name, path.read_bytes(), mime


def transcribe(client: Client, model: str, path: Path) -> str:
    """POST /v1/audio/transcriptions (multipart); the transcript."""
    answer = client.request("POST", "/v1/audio/transcriptions", data={"model": model},
                            files={"file": _upload(path)}).json()
    return str(answer.get("text", "")).strip()


def convert(client: Client, model: str, path: Path) -> tuple[str, int]:
    """POST /v1/documents/convert (multipart); the joined Markdown and the page count."""
    answer = client.request("POST", "/v1/documents/convert", data={"model": model},
                            files={"file": _upload(path)}).json()
    return str(answer.get("markdown", "")).strip(), len(answer.get("pages") or [])


# ------------------------------------------------------------------------ advice

def serve_command(url: str) -> str:
    """The `hypnos serve` command that would answer at ``url``."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    parts = ["hypnos serve"]
    if host not in LOOPBACK:
        parts.append(f"--host {host}")
    if parsed.port and parsed.port != 9999:
        parts.append(f"--port {parsed.port}")
    return " ".join(parts)


def advice(exc: click.ClickException, url: str) -> str | None:
    """What to change when the server refused us or is not there; None for other errors."""
    if isinstance(exc, Unreachable):
        where = "" if (urlparse(url).hostname or "") in LOOPBACK else " on that machine"
        return (f"No Hypnos server answers at {url}. Start one{where} with:\n"
                f"  {serve_command(url)}\n"
                "or point hypnos chat at another with --url (HYPNOS_URL).")
    if not isinstance(exc, ServerSaidNo):
        return None
    if exc.status == 401:
        return ("The server wants an API key it knows: set HYPNOS_API_KEY (or pass "
                "--api-key) to one of the keys in the server's server.api_keys, "
                "[[server.keys]] or HYPNOS_API_KEYS.")
    if exc.status == 403:
        text = str(exc.message)
        if "Host" in text:
            return (f"The server does not answer the host name in {url}: add it to the "
                    "server's server.allowed_hosts (\"*\" behind a reverse proxy that checks "
                    "Host), or use an address it answers such as 127.0.0.1.")
        if "origin" in text.lower():
            return "Add this origin to the server's server.allowed_origins."
        return ("This key may not do that: set HYPNOS_API_KEY to an admin key (a plain "
                "server.api_keys entry, or a [[server.keys]] entry with admin = true).")
    return None
