"""Speculative decoding for the llama decode loop: drafters propose tokens, the target model
verifies them in the same batch as every other slot (``decode_loop``), and the accepted prefix
is kept.

``Drafter`` is the one interface every method implements (n-grams and predicted outputs in
``drafts``, a draft model in ``draft_model``, MTP heads in ``mtp``; ``auto``'s policy and
prompt lookup in front wrap another drafter). Its ``plan`` says what it wants for a step:
tokens drafted now, or a ``Batched`` ask that a shared ``BatchDrafter`` answers together
with every other slot asking it (one draft decode per drafted position for all of them).
The decode loop reads only that answer, never a drafter's type. ``accept`` holds the pure
acceptance rules; ``tuning`` the ``auto`` policy. ``SpecStats`` is what a job reports.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

#: (sequence id, its context: the slot's tokens plus its pending one, the draft length cap)
DraftRequest = tuple[int, Sequence[int], int]


class BatchDrafter(Protocol):
    """A drafter of several sequences at once (``DraftModel``, ``MtpDrafter``): the drafts of
    ``requests`` (distinct sequences), in order, each at most its cap."""

    def propose_many(self, requests: Sequence[DraftRequest]) -> list[list[int]]: ...


@dataclass(frozen=True)
class Batched:
    """A step's draft asked of ``source`` for its sequence ``seq``, at most ``n_max`` tokens
    (0: none this step), made together with the other slots asking ``source``."""
    source: BatchDrafter
    seq: int
    n_max: int


#: What a drafter wants for one step: (tokens drafted now, None), or ([], a ``Batched`` ask).
Plan = tuple[list[int], "Batched | None"]


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
    the step's ``llama_decode`` took. ``close`` frees what it holds (a draft model's sequence).

    ``plan(context, n_max)`` is what the decode loop calls once per step: ``propose``'s
    tokens now, or a ``Batched`` ask (a model drafter's shared source), with the same
    bookkeeping ``propose`` would do (``auto``'s policy is consulted once either way). With
    ``n_max`` 0 it drafts nothing (no tokens, or a ``Batched`` ask for 0)."""

    method: str

    def propose(self, context: list[int], n_max: int) -> list[int]: ...

    def plan(self, context: list[int], n_max: int) -> Plan: ...

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


@dataclass(eq=False)
class Drafting:
    """One job's speculative decoding: its ``drafter``, or ``drafter_for``, a maker of one
    for the slot's sequence (a draft model's, MTP heads'), called when the job starts; and
    ``stats``, what it drafted and got accepted."""
    stats: SpecStats
    drafter: Drafter | None = None
    drafter_for: Callable[[int], Drafter] | None = None
