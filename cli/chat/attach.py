"""``/file PATH``: what a file becomes in the conversation. An image is a content part for
a vision model; audio is transcribed by the server's speech-to-text model; a PDF, DOCX (and
the other formats docling reads) is converted to Markdown by its document model. The
result waits in the session for the next message.

``kind_of`` is pure; ``attach`` blocks on the server's transcription or conversion.
"""
from __future__ import annotations

import base64
import mimetypes
from pathlib import Path

from hypnos.cli.chat import api
from hypnos.cli.chat.session import Attachment
from hypnos.cli.client import Client

IMAGE = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")
AUDIO = (".wav", ".mp3", ".flac", ".ogg", ".oga", ".opus", ".m4a", ".webm")
DOCUMENT = (".pdf", ".docx", ".pptx", ".xlsx", ".html", ".htm")


class AttachError(ValueError):
    """The file cannot go into this chat; the message says why and what would work."""


def kind_of(path: Path) -> str:
    """"image", "audio" or "document" by the file's extension; AttachError otherwise."""
    ext = path.suffix.lower()
    for kind, exts in (("image", IMAGE), ("audio", AUDIO), ("document", DOCUMENT)):
        if ext in exts:
            return kind
    raise AttachError(f"{path.name}: not an image ({', '.join(IMAGE)}), audio "
                      f"({', '.join(AUDIO)}) or document ({', '.join(DOCUMENT)})")


def image_part(path: Path) -> dict:
    """An image_url content part carrying the file as a data: URL."""
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def attach(client: Client, status: dict, model: str, path: Path) -> Attachment:
    """The attachment ``path`` makes for a chat with ``model``, given the server's
    /v1/memory/status ``status``. Raises AttachError for a missing file, an image to a model
    without vision, no model to transcribe or convert; the server's own refusals propagate
    (ServerSaidNo)."""
    path = path.expanduser()
    if not path.is_file():
        raise AttachError(f"{path}: no such file")
    kind = kind_of(path)
    if kind == "image":
        current: dict = next((m for m in status.get("models", []) if m["id"] == model), {})
        if not api.serves(current, "vision"):
            seeing = [m["id"] for m in api.chat_models(status) if api.serves(m, "vision")]
            hint = (f"switch with /model {seeing[0]}" if seeing
                    else "this server has no vision model")
            raise AttachError(f"{model} has no vision, so it cannot read {path.name}: "
                              f"{hint}")
        return Attachment(path.name, kind, part=image_part(path))
    modality = "speech_to_text" if kind == "audio" else "document_conversion"
    serving = api.model_for(status, modality)
    if serving is None:
        what = "transcribes audio" if kind == "audio" else "converts documents"
        raise AttachError(f"no model on this server {what} ({modality}), so {path.name} "
                          "cannot be attached")
    if kind == "audio":
        text = api.transcribe(client, serving, path)
    else:
        text, _pages = api.convert(client, serving, path)
    if not text:
        raise AttachError(f"{serving} found no text in {path.name}")
    return Attachment(path.name, kind, text=text)
