"""The conversation of one ``hypnos chat``: model, system prompt, thinking switch, history,
the attachments waiting for the next message. Pure: it builds request bodies and records
answers; the loop sends them.

The history holds answers only, never thoughts (the spec's advice, section 17): the prefix
of every request is the previous request plus the last turn, so the server's slot cache
serves it again (cached_tokens on the next answer).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Attachment:
    """What ``/file`` made of a file, waiting for the next message: a content part for an
    image, text (a transcript, a converted document) for the rest."""
    name: str
    kind: str                       # "image", "audio" or "document"
    part: dict | None = None        # image_url part
    text: str | None = None         # transcript or Markdown

    def text_part(self) -> str:
        label = "Transcript of" if self.kind == "audio" else "Contents of"
        return f"{label} {self.name}:\n\n{self.text}"


@dataclass
class Session:
    model: str
    system: str = ""
    think: bool | None = None       # None: the server's default; True on; False off
    max_tokens: int | None = None
    messages: list[dict] = field(default_factory=list)
    pending: list[Attachment] = field(default_factory=list)
    last_thinking: str = ""

    def user_message(self, text: str) -> dict:
        """The next user message: the typed text with the waiting attachments (text parts
        before it, images after it). Plain string content when there is no image."""
        texts = [a.text_part() for a in self.pending if a.text is not None]
        images = [a.part for a in self.pending if a.part is not None]
        body = "\n\n".join([*texts, text]) if texts else text
        if not images:
            return {"role": "user", "content": body}
        return {"role": "user", "content": [{"type": "text", "text": body}, *images]}

    def request(self, user: dict) -> dict:
        """The streamed chat request for the history plus ``user``."""
        messages = ([{"role": "system", "content": self.system}] if self.system else [])
        body: dict = {"model": self.model, "messages": [*messages, *self.messages, user],
                      "stream": True}
        if self.think is True:
            body["think"] = True
        elif self.think is False:
            body["reasoning_effort"] = "none"
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def record(self, user: dict, answer: str, thinking: str) -> None:
        """Keep a finished (or interrupted) turn; the attachments it carried are spent."""
        self.messages += [user, {"role": "assistant", "content": answer}]
        self.pending.clear()
        self.last_thinking = thinking

    def clear(self) -> None:
        self.messages.clear()
        self.pending.clear()
        self.last_thinking = ""
