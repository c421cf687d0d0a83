"""The session a request names (chat and the /v1/sessions routes)."""
from __future__ import annotations


def session_key(request, body: dict | None) -> str | None:
    """session_id, prompt_cache_key, promptCacheKey (body), then X-Session-Id."""
    for name in ("session_id", "prompt_cache_key", "promptCacheKey"):
        value = (body or {}).get(name)
        if isinstance(value, str) and value:
            return value
    header = request.headers.get("x-session-id", "").strip()
    return header or None
