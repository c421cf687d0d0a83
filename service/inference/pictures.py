"""``describe_pictures`` of /v1/documents/convert (spec 12): each picture of a converted page
goes to a vision model through the chat engine, as an OpenAI ``image_url`` part with a
data: URI, and its description is inserted under the picture's ``<!-- image -->``
placeholder as ``> **Picture:** …``."""
from __future__ import annotations

import base64

from hypnos.engines.records import ChatRequest, ConvertedPage
from hypnos.service.inference.capabilities import PICTURES, require
from hypnos.service.inference.leased import leased_by
from hypnos.service.scheduling.scheduler import Scheduler

PLACEHOLDER = "<!-- image -->"
PROMPT = ("Describe this picture from a document in one or two sentences, for a reader who "
          "cannot see it. Mention any text, numbers or chart trends it shows.")
MAX_TOKENS = 160


def check_vision_model(sched: Scheduler, model_id: str) -> None:
    """404 when unknown or disabled, 400 when it cannot describe pictures."""
    require(sched, model_id, PICTURES, param="describe_pictures")


def insert_descriptions(markdown: str, descriptions: list[str | None]) -> str:
    """The k-th placeholder gets the k-th description (None: left alone)."""
    parts = markdown.split(PLACEHOLDER)
    out = parts[0]
    for k, rest in enumerate(parts[1:]):
        text = descriptions[k] if k < len(descriptions) else None
        out += PLACEHOLDER
        if text:
            quoted = "\n> ".join(line for line in text.strip().splitlines() if line.strip())
            out += f"\n\n> **Picture:** {quoted}"
        out += rest
    return out


async def describe_page(sched: Scheduler, model_id: str, page: ConvertedPage) -> int:
    """Describe every picture of ``page`` that has bytes, in place; returns how many were
    described. One lease of the vision model for the page. Raises HypnosError."""
    if not any(p.data for p in page.pictures):
        return 0
    descriptions: list[str | None] = []
    async with leased_by(sched, model_id, PICTURES, param="describe_pictures",
                         checked=True) as call:
        for pic in page.pictures:
            if not pic.data:
                descriptions.append(None)
                continue
            uri = f"data:{pic.mime};base64," + base64.b64encode(pic.data).decode("ascii")
            req = ChatRequest(messages=[{"role": "user", "content": [
                {"type": "text", "text": PROMPT},
                {"type": "image_url", "image_url": {"url": uri}}]}], max_tokens=MAX_TOKENS)
            result = await call.run(call.chat.chat, req, None, what=(
                f"Describing a picture of page {page.page} with '{model_id}'"))
            descriptions.append(result.text)
    page.markdown = insert_descriptions(page.markdown, descriptions)
    return sum(1 for d in descriptions if d)
