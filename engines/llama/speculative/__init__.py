"""Speculative decoding for the llama decode loop: drafters propose tokens, the target model
verifies them in the same batch as every other slot (``decode_loop``), and the accepted prefix
is kept.

``Drafter`` is the one interface every method implements (n-grams and predicted outputs in
``drafts``, a draft model in ``draft_model``; MTP heads later). ``accept`` holds the pure
acceptance rules; ``tuning`` the ``auto`` policy. ``SpecStats`` is what a job reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Drafter(Protocol):
    """Proposes the next tokens of one job's answer. Called on the decode thread only.

    ``propose`` gets the whole context (prompt + accepted answer tokens, oldest first; a
    rejected draft token is never in it) and returns at most ``n_max`` tokens it guesses come
    next (possibly none). A drafter keeping its own state (an index, a draft model's KV) must
    accept that ``context`` is usually the previous one extended, but may be any list: after
    a rejection it is the previous context cut after the accepted prefix plus the target's
    token, so a draft model rolls its KV back to the common prefix there.

    ``on_accept(drafted, accepted, step_s)`` follows every step the job generated in: how
    many drafted tokens the target checked (0: none were proposed) and kept, and the seconds
    the step's ``llama_decode`` took. ``close`` frees what it holds (a draft model's sequence)."""

    method: str

    def propose(self, context: list[int], n_max: int) -> list[int]: ...

    def on_accept(self, drafted: int, accepted: int, step_s: float = 0.0) -> None: ...

    def close(self) -> None: ...


@dataclass
class SpecStats:
    """One job's speculation: ``drafted`` tokens put in a batch for checking, ``accepted``
    those the target picked too (``drafted - accepted`` were rejected or never reached
    because the answer ended), ``n_max`` the draft length it ran with, ``steps`` the decode
    steps that carried a draft."""
    method: str
    n_max: int
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    #: The longest draft a step may carry, when longer than ``n_max`` (a draft model's
    #: ``LookupFirst`` copies up to prompt lookup's length); 0: ``n_max``.
    lookup_max: int = 0

    @property
    def cap(self) -> int:
        return max(self.n_max, self.lookup_max)

    @property
    def rejected(self) -> int:
        return self.drafted - self.accepted

    def to_wire(self) -> dict:
        return {"method": self.method, "drafted": self.drafted, "accepted": self.accepted,
                "n_max": self.n_max}
