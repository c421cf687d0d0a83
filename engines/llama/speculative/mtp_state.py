"""The MTP drafter's bookkeeping, pure: which rows to feed the MTP context after a target
decode, and where each sequence stands. No llama.cpp here; ``mtp.MtpDrafter`` acts on it.

An MTP head predicts the token after next from two inputs per position ``p``: the token at
``p`` and the target's hidden state at ``p - 1`` (its last layer, output-normed: what
llama.cpp calls the nextn embedding). So after the target decodes rows at positions
``p0..pn`` of a sequence, the MTP context is fed, for each row, that row's token with the
hidden state of the row before it (for the first row: the hidden state kept from the last
decode, ``SeqState.pending``). The MTP context keeps its own KV (one attention block), whose
positions mirror the target's.

Per sequence the state says: ``kv_len``, the positions held in the MTP KV (``0..kv_len-1``);
``ready_pos``, the position of the token a draft starts from (the token the target sampled
last, not yet decoded), valid when ``ready``; ``pending``, the hidden state at
``ready_pos - 1``; and the hidden states of the last decode's rows (``rows``/``positions``),
so a rollback to any of them finds the state to draft from.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Hidden rows kept from the last decode of a sequence: enough for a rollback inside any
#: draft (n_max + 1 rows), not a prompt chunk's worth.
KEEP_ROWS = 64


@dataclass
class SeqState:
    """Where one sequence stands in the MTP context (see the module docstring)."""

    n_embd: int
    kv_len: int = 0
    ready: bool = False
    ready_pos: int = 0
    pending: np.ndarray = field(init=False)
    rows: np.ndarray = field(init=False)
    positions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pending = np.zeros(self.n_embd, dtype=np.float32)
        self.rows = np.empty((0, self.n_embd), dtype=np.float32)

    def hidden_before(self, pos: int) -> np.ndarray:
        """The target's hidden state at ``pos - 1`` if this state still knows it, else zeros
        (position 0 has none; after a rollback past the last decode's rows it is lost, and
        the one MTP row fed with zeros only drafts worse, never wrongly: the target
        verifies every draft)."""
        if self.ready and self.ready_pos == pos:
            return self.pending
        if pos - 1 in self.positions:
            return self.rows[self.positions.index(pos - 1)]
        return np.zeros(self.n_embd, dtype=np.float32)

    def decoded(self, positions: list[int], hidden: np.ndarray) -> None:
        """The target decoded ``positions`` (consecutive) of this sequence with these hidden
        rows, and the MTP context was fed them: the next draft starts after the last one."""
        self.rows = np.array(hidden[-KEEP_ROWS:], dtype=np.float32)
        self.positions = list(positions[-KEEP_ROWS:])
        self.pending = self.rows[-1]
        self.ready, self.ready_pos = True, positions[-1] + 1
        self.kv_len = positions[-1] + 1

    def rollback(self, keep: int) -> None:
        """Positions ``keep..`` left the target's KV (a rejected draft tail, a shorter reused
        prefix, a new job: ``keep = 0``). The MTP KV is cut the same way by the caller; the
        next draft starts at ``keep`` when the hidden state at ``keep - 1`` is known."""
        self.kv_len = min(self.kv_len, keep)
        if keep <= 0:
            self.ready, self.ready_pos = False, 0
            self.pending = np.zeros(self.n_embd, dtype=np.float32)
            self.rows, self.positions = self.rows[:0], []
            return
        if self.ready and self.ready_pos == keep:
            return
        if keep - 1 in self.positions:
            self.pending = self.rows[self.positions.index(keep - 1)]
            self.ready, self.ready_pos = True, keep
        else:
            self.ready = False


@dataclass(frozen=True)
class FeedRow:
    """One row for the MTP context: ``token`` at ``pos`` of ``seq``, with the target's hidden
    state of the position before (``hidden``)."""

    seq: int
    token: int
    pos: int
    hidden: np.ndarray


@dataclass(frozen=True)
class SeqRows:
    """A sequence's rows in one target batch: their batch indices and positions."""

    seq: int
    indices: list[int]
    positions: list[int]


def group_rows(seq_ids: list[int], positions: list[int]) -> list[SeqRows]:
    """The target batch's rows grouped by sequence, in batch order. Raises ValueError when a
    sequence's positions are not consecutive and increasing (a batch the MTP feed cannot
    mirror)."""
    by_seq: dict[int, SeqRows] = {}
    for i, (seq, pos) in enumerate(zip(seq_ids, positions, strict=True)):
        group = by_seq.setdefault(seq, SeqRows(seq, [], []))
        if group.positions and pos != group.positions[-1] + 1:
            raise ValueError(f"sequence {seq}: position {pos} follows {group.positions[-1]}")
        group.indices.append(i)
        group.positions.append(pos)
    return list(by_seq.values())


def plan_feed(state: SeqState, group: SeqRows, tokens: list[int],
              hidden: np.ndarray) -> tuple[int | None, list[FeedRow]]:
    """The rows to feed the MTP context for one sequence's part of a target batch, and the
    position from which its MTP KV must be cut first (None: nothing to cut; else stale
    entries at or past the batch's first position). A gap (the MTP KV ends before the
    batch's first position: a decode it was not shown) is left as a hole, which attention
    skips: drafts get worse, never wrong. ``tokens`` and ``hidden`` are the whole batch's
    (rows indexed by batch index). Pure: ``state`` is not changed (``SeqState.decoded`` is
    called once the rows are in)."""
    first = group.positions[0]
    cut = first if state.kv_len > first else None
    rows: list[FeedRow] = []
    before = state.hidden_before(first)
    for i, pos in zip(group.indices, group.positions, strict=True):
        rows.append(FeedRow(group.seq, tokens[i], pos, before))
        before = hidden[i]
    return cut, rows
