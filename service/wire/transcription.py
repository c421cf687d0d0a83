"""Transcription fields shared by POST /v1/audio/transcriptions and the live socket: pure
parsing, no app, scheduler or engine."""
from __future__ import annotations

import re

from hypnos.service import errors
from hypnos.service.wire import json_text

MAX_HOTWORDS = 25


def parse_hotwords(value) -> list[str]:
    """Terms from a comma list, a JSON list (as text or as JSON), or a list of either (one
    multipart part each). More than MAX_HOTWORDS is a 400."""
    items = value if isinstance(value, list) else [] if value in (None, "") else [value]
    words: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise errors.InvalidRequest("'hotwords' must be strings", param="hotwords")
        text = item.strip()
        if text.startswith("["):
            inner = json_text.loads(text, "'hotwords' (it starts with '[')", "hotwords")
            if not isinstance(inner, list) or not all(isinstance(w, str) for w in inner):
                raise errors.InvalidRequest("'hotwords' must be a JSON list of strings",
                                            param="hotwords")
            words += inner
        else:
            words += text.split(",")
    words = [w.strip() for w in words if w.strip()]
    if len(words) > MAX_HOTWORDS:
        raise errors.InvalidRequest(f"{len(words)} hotwords were sent; at most "
                                    f"{MAX_HOTWORDS} are accepted", param="hotwords")
    return words


#: What ``language`` must be, as /openapi.json publishes it: an ISO 639-1 (or 639-3) code,
#: optionally with region or script subtags ("en", "EN", "en-US", "zh_Hant"). Matched as a
#: JSON Schema validator in Python matches it (``re.search``: "$" also before a final "\n"),
#: so the server and a validator of the document agree on every string.
LANGUAGE_SCHEMA = {"type": "string", "pattern": r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*$"}


def parse_language(value: str | None) -> str | None:
    """The code of a ``LANGUAGE_SCHEMA`` tag, lowercased ("en-US" is read as "en"); any other
    string is the 400 (param ``language``)."""
    if value is None:
        return None
    if not re.search(LANGUAGE_SCHEMA["pattern"], value):
        raise errors.InvalidRequest(f"language {value!r} is not an ISO 639-1 code such as "
                                    "'en'", param="language")
    return re.split(r"[-_\n]", value, maxsplit=1)[0].lower()
