"""The session a request names (chat, /v1/responses and the /v1/sessions routes), and the one
place a name becomes the engine's session key.

Named sessions belong to the key that names them: the engine key is the name under the key's
owner id (`owned_session`), so another key's same name is simply another session (absent
until that key fills it). With no keys the owner is "" and the name is the key. The admin key
is no exception: it has its own namespace and cannot reach another key's session by name.
The request's own key (its record's owner) is joined in by the route (`http.caller.session_key`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Headed(Protocol):
    """A request, as far as the session name goes: its headers."""

    @property
    def headers(self) -> Mapping[str, str]: ...


def session_name(request: Headed, body: Mapping[str, Any] | None) -> str | None:
    """What the client called the session: session_id, prompt_cache_key, promptCacheKey
    (body), then X-Session-Id."""
    for name in ("session_id", "prompt_cache_key", "promptCacheKey"):
        value = (body or {}).get(name)
        if isinstance(value, str) and value:
            return value
    header = request.headers.get("x-session-id", "").strip()
    return header or None


def session_yields(body: Mapping[str, Any] | None) -> bool:
    """Whether the session's slot binding yields when every slot is bound: true unless the
    body names it by ``session_id``. ``prompt_cache_key``, ``promptCacheKey`` and
    X-Session-Id are what agent clients send on every request of a conversation (each Codex
    session, each opencode chat), a cache hint rather than a reservation: the least recently
    used idle one gives its slot to a new session (its prefix goes to the prompt cache), so
    the next conversation is served instead of refused."""
    value = (body or {}).get("session_id")
    return not (isinstance(value, str) and value)


def owned_session(owner: str, name: str) -> str:
    """The engine's session key for ``name`` stored by ``owner`` (`keys.key_owner`: 16 hex,
    no colon; "" when keys are off)."""
    return f"{owner}:{name}" if owner else name
