"""Context checkpoints: snapshots of the part of a sequence's state that cannot be cut back.

A model with recurrent layers (Mamba, the Gated DeltaNet blocks of Qwen3.5: hybrid) folds
every token into one state per sequence, so llama.cpp cannot remove the tail of a sequence;
a sliding-window model whose window cache drops the cells that slid out (Gemma 3 and 4 when
the window cache is not full-sized) cannot continue from a shorter prefix either. Reusing a
prefix shorter than what a slot holds then needs that part of the state as it was after the
prefix: a ``Checkpoint``, llama.cpp's partial sequence state (``LLAMA_STATE_SEQ_FLAGS_
PARTIAL_ONLY``: the recurrent or window cells only, the plain attention KV is trimmed in
place). ``DecodeLoop`` takes them while prefilling, at the positions ``positions`` chooses,
keeps at most ``CHECKPOINTS_PER_SLOT`` per slot (``add``) and restores the latest usable one
in ``DecodeLoop._trim``.

``positions`` and ``add`` are pure; ``read_partial``, ``write_partial`` and ``Trimming`` (the
decode loop's half) touch a context and run on the decode thread only.
"""
from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hypnos.planner.types import CHECKPOINTS_PER_SLOT

if TYPE_CHECKING:
    from hypnos.engines.llama.slots import Job, Slot

#: A long prefill is also checkpointed every this many tokens (token counts that are
#: multiples of it), so a prompt that parts from a cached one early loses at most this much.
EVERY = 1024
#: Checkpoints this many tokens before the end of a prompt: the next turn of the same
#: conversation parts near the end (at the assistant header), and a new conversation with
#: the same system prompt and a short first message within the last few dozen tokens.
TAIL = (16, 64)
#: No checkpoint covers fewer tokens than this, and none is taken this close to another
#: (an earlier one serves as well, for a split batch and a copy less).
MIN_GAP = 32

__all__ = ["CHECKPOINTS_PER_SLOT", "EVERY", "MIN_GAP", "TAIL", "Checkpoint", "Trimming", "add",
           "drop_after", "positions", "read_partial", "write_partial"]


@dataclass(eq=False)
class Checkpoint:
    """The partial state of a slot's sequence after evaluating its first ``n_tokens``
    tokens (``llama_state_seq_get_data_ext`` with the partial-only flag)."""
    n_tokens: int
    state: bytearray

    @property
    def bytes(self) -> int:
        return len(self.state)


def positions(start: int, end: int, boundaries: Iterable[int] = (), existing: Iterable[int] = (),
              every: int = EVERY, tail: Iterable[int] = TAIL, min_gap: int = MIN_GAP) -> list[int]:
    """The token counts, ascending, at which to checkpoint a prefill that takes a slot from
    ``start`` evaluated tokens to ``end`` (the prompt's length). Candidates, in priority order:
    ``boundaries`` (where a prefix the caller names ends), ``end - t`` for each ``t`` of
    ``tail``, then every multiple of ``every``. A candidate is kept when it lies strictly
    between ``start`` and ``end``, covers at least ``min_gap`` tokens, and is at least
    ``min_gap`` away from every checkpoint the slot keeps (``existing``) and every candidate
    kept before it."""
    wanted = [*boundaries, *(end - t for t in tail)]
    if every > 0:
        wanted += range(every * (start // every + 1), end, every)
    taken = list(existing)
    chosen: list[int] = []
    for pos in wanted:
        if not (start < pos < end and pos >= min_gap):
            continue
        if all(abs(pos - other) >= min_gap for other in taken):
            taken.append(pos)
            chosen.append(pos)
    return sorted(chosen)


def add(checkpoints: list[Checkpoint], new: Checkpoint,
        limit: int = CHECKPOINTS_PER_SLOT) -> list[Checkpoint]:
    """Insert ``new`` in ``checkpoints`` (ascending ``n_tokens``; one at the same count is
    replaced) and, over ``limit``, drop the checkpoints whose loss leaves the smallest gap
    between their neighbours; never the first (the prefix every conversation of the slot
    shares) nor the last (the newest, nearest the end). Returns the dropped ones."""
    checkpoints[:] = [c for c in checkpoints if c.n_tokens != new.n_tokens]
    at = next((i for i, c in enumerate(checkpoints) if c.n_tokens > new.n_tokens),
              len(checkpoints))
    checkpoints.insert(at, new)
    dropped = []
    while len(checkpoints) > max(limit, 0):
        if len(checkpoints) <= 2:
            dropped.append(checkpoints.pop(0))
            continue
        i = min(range(1, len(checkpoints) - 1),
                key=lambda k: checkpoints[k + 1].n_tokens - checkpoints[k - 1].n_tokens)
        dropped.append(checkpoints.pop(i))
    return dropped


def drop_after(checkpoints: list[Checkpoint], n_tokens: int) -> None:
    """Forget the checkpoints covering more than ``n_tokens`` tokens (the slot was cut
    back to ``n_tokens``: they describe a text it no longer holds)."""
    checkpoints[:] = [c for c in checkpoints if c.n_tokens <= n_tokens]


# ------------------------------------------------------------- C calls (decode thread)

def read_partial(ll, ctx, seq_id: int) -> bytearray:
    """The partial state of sequence ``seq_id`` (recurrent and window cells) as bytes."""
    flags = ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    size = ll.llama_state_seq_get_size_ext(ctx, seq_id, flags)
    state = bytearray(size)
    if size:
        buf = (ctypes.c_uint8 * size).from_buffer(state)
        written = ll.llama_state_seq_get_data_ext(ctx, buf, size, seq_id, flags)
        if written != size:
            raise RuntimeError(f"llama_state_seq_get_data_ext wrote {written} of {size} bytes")
    return state


def write_partial(ll, ctx, seq_id: int, state: bytearray) -> bool:
    """Load a partial state into sequence ``seq_id``, replacing its recurrent and window
    cells (the plain attention KV stays). False when llama.cpp refuses it; the sequence's
    partial state is then unknown."""
    size = len(state)
    if not size:
        return False
    buf = (ctypes.c_uint8 * size).from_buffer(state)
    flags = ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    return ll.llama_state_seq_set_data_ext(ctx, buf, size, seq_id, flags) == size


class Trimming:
    """Mixed into ``DecodeLoop``, which provides ``ll``, ``ctx``, ``mem`` and ``forget``
    (which also drops the slot's checkpoints). Decode thread only.

    ``checkpointing``: this model needs checkpoints (recurrent or hybrid layers, or a
    sliding window whose cache is not full-sized); otherwise ``_plan_checkpoints`` plans
    none and a prefill's batches are cut as before."""

    ll: Any
    ctx: Any
    mem: Any
    checkpointing: bool = False
    n_swa: int = 0

    def forget(self, slot: Slot) -> None:
        raise NotImplementedError

    def _init_checkpoints(self, swa_full: bool) -> None:
        """``swa_full``: the context's sliding-window cache holds the whole context (so a
        window is never lost and needs no checkpoint)."""
        ll = self.ll
        model = ll.llama_get_model(self.ctx)
        self.n_swa = int(ll.llama_model_n_swa(model))
        stateful = ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model)
        self.checkpointing = bool(stateful or (self.n_swa > 0 and not swa_full))

    def _trim(self, slot: Slot, keep: int) -> int:
        """Cut the slot's KV back to its first ``keep`` tokens; returns the tokens it really
        kept. A plain model removes the tail. Where llama.cpp refuses the partial removal
        (recurrent state) or the window cache no longer holds the ``n_swa`` positions before
        ``keep``, the latest checkpoint covering at most ``keep`` tokens is restored and the
        KV cut there; with none (or one llama.cpp refuses) the slot is emptied (0). The
        slot's checkpoints beyond what it keeps are dropped."""
        keep = max(0, min(keep, len(slot.tokens)))
        if keep < len(slot.tokens):
            if not (self._window_holds(slot, keep) and self.ll.llama_memory_seq_rm(
                    self.mem, slot.seq_id, keep, -1)):
                keep = self._restore_checkpoint(slot, keep)
            del slot.tokens[keep:]
        drop_after(slot.checkpoints, keep)
        return keep

    def _window_holds(self, slot: Slot, keep: int) -> bool:
        """The sliding-window cache still holds what continuing after ``keep`` tokens
        attends to (llama-server's test: no position after ``keep - n_swa`` is missing).
        Always true without a window; a recurrent part answers through ``seq_rm``."""
        if self.n_swa <= 0 or keep == 0:
            return True
        pos_min = self.ll.llama_memory_seq_pos_min(self.mem, slot.seq_id)
        return 0 <= pos_min <= max(0, keep - self.n_swa)

    def _restore_checkpoint(self, slot: Slot, keep: int) -> int:
        """Restore the latest checkpoint of at most ``keep`` tokens and cut the KV after it;
        its token count, or 0 (the slot emptied) when there is none or it fails."""
        usable = [c for c in slot.checkpoints if c.n_tokens <= keep]
        if usable:
            cp = usable[-1]
            if (write_partial(self.ll, self.ctx, slot.seq_id, cp.state)
                    and self.ll.llama_memory_seq_rm(self.mem, slot.seq_id, cp.n_tokens, -1)):
                return cp.n_tokens
        self.forget(slot)
        return 0

    def _plan_checkpoints(self, slot: Slot, job: Job) -> None:
        """Where this prefill (from the slot's tokens to the end of the prompt) stops to
        take checkpoints: none on a model that needs none."""
        job.checkpoint_at = positions(
            len(slot.tokens), len(job.prompt), job.boundaries,
            [c.n_tokens for c in slot.checkpoints]) if self.checkpointing else []

    def _checkpoint_due(self, slot: Slot) -> None:
        """After a decode: take the checkpoint the slot's prefill stopped at, if any."""
        job = slot.job
        at = job.checkpoint_at
        while at and at[0] < len(slot.tokens):    # passed (never, unless cut short)
            at.pop(0)
        if at and at[0] == len(slot.tokens):
            at.pop(0)
            add(slot.checkpoints, Checkpoint(len(slot.tokens),
                                             read_partial(self.ll, self.ctx, slot.seq_id)))

    def _prefill_room(self, slot: Slot) -> int:
        """How many of the slot's pending tokens the next batch may take before the next
        checkpoint position (all of them when none is planned)."""
        at = slot.job.checkpoint_at
        if at and at[0] > len(slot.tokens):
            return at[0] - len(slot.tokens)
        return len(slot.job.pending)
