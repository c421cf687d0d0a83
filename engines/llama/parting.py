"""Why a prompt missed: where it parted from the best cached prefix of its key (issue 36,
item 5). A timestamp in a system prompt, a header that changes per request, tools sent in
another order: each makes a prompt part from what the server holds a few tokens in, and the
whole rest is read again. The report names the token where it happened and shows both
sides, so a user can see what broke the cache.

``parting`` is pure; the decode loop (``prompt_reuse``) gives it the token lists of its
slots and the prompt cache's best entry of the job's partition, and a renderer of tokens.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from hypnos.engines.llama.prompt_cache_entries import common_prefix

#: Tokens of each side shown after the parting, and of the shared text before it.
AFTER = 12
BEFORE = 6
#: An excerpt is cut to this many characters.
EXCERPT_CHARS = 80


def parting(prompt: list[int], candidates: Iterable[list[int]],
            render: Callable[[list[int]], str]) -> dict | None:
    """Where ``prompt`` parts from the candidate token list sharing its longest prefix, or
    None without a candidate sharing a token. ``parted_at`` is None when the best candidate
    is whole at the start of the prompt (the prompt only adds to it: nothing parted).
    Otherwise ``before`` is the shared text just before the parting, ``prompt`` and
    ``cached`` what each side says from there."""
    best, best_n = None, 0
    for tokens in candidates:
        if not tokens or tokens[0] < 0:          # a media prefill's placeholders
            continue
        n = common_prefix(tokens, prompt)
        if n > best_n or (n == best_n and best is not None and len(tokens) < len(best)):
            best, best_n = tokens, n
    if best is None:
        return None
    out: dict = {"best_cached_prefix": best_n, "parted_at": None}
    if best_n < len(best) and best_n < len(prompt):
        out.update(parted_at=best_n,
                   before=_cut(render(prompt[max(0, best_n - BEFORE):best_n]), tail=True),
                   prompt=_cut(render(prompt[best_n:best_n + AFTER])),
                   cached=_cut(render(best[best_n:best_n + AFTER])))
    return out


def _cut(text: str, tail: bool = False) -> str:
    if len(text) <= EXCERPT_CHARS:
        return text
    return text[-EXCERPT_CHARS:] if tail else text[:EXCERPT_CHARS]
