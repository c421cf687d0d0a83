"""The context policy: how many tokens of context a model is funded with, in one place.

Three numbers, used by the placement math, the scheduler, the engines and the routes:

- ``FALLBACK_CONTEXT`` (4096): per slot, when neither the config (``context_len = 0``) nor
  the model (no trained context in its metadata) says.
- ``DEFAULT_CONTEXT_CAP`` (8192): per slot, the cap on the trained context used when the
  config says ``context_len = 0`` (a model trained for 128k is not funded 128k by default).
- ``REQUEST_CONTEXT_FLOOR`` (2048): the least per-slot context a request is estimated to
  need (a short prompt still gets room to answer).

``fundable_window`` narrows that window to what the machine's memory can fund, given the
placement check as a function. Pure functions: ``trained`` is the model's trained context
(0 when unknown), ``configured`` the config's ``context_len`` across all slots (0 = the
default).
"""
from __future__ import annotations

from collections.abc import Callable

FALLBACK_CONTEXT = 4096
DEFAULT_CONTEXT_CAP = 8192
REQUEST_CONTEXT_FLOOR = 2048
# About this many characters make a token when no tokenizer has counted the prompt.
CHARS_PER_TOKEN = 4


def default_per_slot(trained: int) -> int:
    """Per-slot context when the config says 0: the trained context capped at 8192, or 4096
    when the trained context is unknown."""
    return min(trained, DEFAULT_CONTEXT_CAP) if trained > 0 else FALLBACK_CONTEXT


def funded_context(configured: int, slots: int, trained: int,
                   per_slot_need: int | None = None) -> int:
    """Context funded across all ``slots``: the config's, else `default_per_slot` x slots;
    raised to ``per_slot_need`` x slots when a request needs more; never above the trained
    context x slots (when known)."""
    slots = max(1, slots)
    total = configured or default_per_slot(trained) * slots
    if per_slot_need:
        total = max(total, per_slot_need * slots)
    if trained > 0:
        total = min(total, trained * slots)
    return total


def context_window(configured: int, slots: int, trained: int) -> int:
    """The per-slot context a client may plan against: the trained context when known (a
    larger request rebuilds the model up to it), else what the config funds per slot (4096
    when it says 0)."""
    if trained > 0:
        return trained
    slots = max(1, slots)
    return (configured or FALLBACK_CONTEXT * slots) // slots


def fundable_window(window: int, fits: Callable[[int], bool], step: int = 256) -> int:
    """The largest per-slot context up to ``window`` (the `context_window`) this machine can
    fund: ``fits(n)`` says whether the model placed alone, every slot funded ``n`` tokens,
    fits the machine. Searched down to a multiple of ``step``; ``window`` itself when it
    fits, and when not even ``REQUEST_CONTEXT_FLOOR`` fits (the refusal is the load's to
    give, with its reason)."""
    if window <= REQUEST_CONTEXT_FLOOR or fits(window) or not fits(REQUEST_CONTEXT_FLOOR):
        return window
    lo, hi = REQUEST_CONTEXT_FLOOR // step, window // step     # lo fits; hi * step may not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid * step):
            lo = mid
        else:
            hi = mid - 1
    return lo * step


def request_context(prompt_tokens: int, max_tokens: int, media_tokens: int = 0) -> int:
    """Per-slot context one request is estimated to need: prompt + media + the answer's
    max_tokens, at least 2048."""
    return max(REQUEST_CONTEXT_FLOOR, prompt_tokens + media_tokens + max_tokens)


def tokens_from_chars(chars: int) -> int:
    """A prompt's token count estimated from its length (about 4 characters a token)."""
    return chars // CHARS_PER_TOKEN
