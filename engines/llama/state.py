"""KV state of llama.cpp sequences, kept in host memory (parking) or as bytes (sessions).

Only the per-sequence calls are used (``llama_state_seq_get_size/get_data/set_data``): a
sequence's state is its KV cells, a few MB per thousand tokens on a small model, and it
loads into any sequence id of a context with the same weights and KV types. The whole-context
``Llama.save_state`` is avoided: it also copies the logits array (hundreds of MB).

Nothing here touches a context from any thread but the decode thread: ``read_seq`` and
``write_seq`` are called through ``DecodeLoop.call``.

Session blob layout (little-endian)::

    b"HYPNOSKV" | u32 version | u32 header length | header JSON | u64 state length | state
    | sha256 of everything before it (32 bytes)

The header is ``{"tokens": [...], "n_tokens": n, "fingerprint": "...", "layout": {...}}``.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hypnos.engines.errors import (
    EngineError, SessionBusy, SessionCorrupt, SessionMismatch, SessionNotFound,
)

MAGIC = b"HYPNOSKV"
VERSION = 1
_HEAD = struct.Struct("<II")
_STATE_LEN = struct.Struct("<Q")
_DIGEST = 32
FINGERPRINT_BYTES = 1 << 20


def weights_fingerprint(path: Path) -> str:
    """``size:mtime_ns:sha256(first MiB)`` of a weights file: cheap, and it changes when the
    file is replaced. Blocks on one 1 MiB read."""
    st = os.stat(path)
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(FINGERPRINT_BYTES)).hexdigest()
    return f"{st.st_size}:{st.st_mtime_ns}:{head}"


@dataclass(frozen=True)
class KVLayout:
    """What a parked state needs to find again to be restored as is."""
    n_ctx: int
    slots: int
    n_ctx_per_slot: int
    type_k: int                 # ggml_type
    type_v: int
    flash_attn: int             # llama_flash_attn_type as requested
    kv_unified: bool

    def as_dict(self) -> dict:
        return asdict(self)

    def accepts_session(self, other: dict, n_tokens: int) -> bool:
        """A session state loads into one slot when its KV types match and it fits the slot
        (the slot count and total context may differ)."""
        return (other.get("type_k") == self.type_k and other.get("type_v") == self.type_v
                and other.get("flash_attn") == self.flash_attn
                and n_tokens < self.n_ctx_per_slot)

    def takes_parked(self, other: KVLayout) -> bool:
        """Slots parked under ``other`` load into this context as they are: the same KV
        types and attention kernel; the context may be larger or smaller (a rebuild), each
        slot being checked against this slot size on restore."""
        return (other.type_k == self.type_k and other.type_v == self.type_v
                and other.flash_attn == self.flash_attn and other.kv_unified == self.kv_unified)


@dataclass
class ParkedSlot:
    seq_id: int
    tokens: list[int]
    state: bytearray
    partition: str = ""         # whose tokens they are (``Slot.partition``), restored with them
    checkpoints: list = field(default_factory=list)   # the slot's ``Checkpoint``s, likewise


@dataclass(frozen=True)
class CachedSlot:
    """A slot parked in the prompt cache: which sequence it was, and the tokens and partition
    that find its entry again (the state itself is the cache's)."""
    seq_id: int
    tokens: list[int]
    partition: str = ""


@dataclass
class ParkedKV:
    """Every used slot of one engine, taken before an unload. Single use: ``restore`` empties
    it whether or not it restored anything. With a prompt cache a slot is parked in the cache
    (``cached``: no copy here) and only a slot the cache refused is copied (``entries``).
    ``slots`` and ``tokens`` count both; ``bytes`` is the copies' (the cache books its own)."""
    model_id: str
    layout: KVLayout
    fingerprint: str
    entries: list[ParkedSlot] = field(default_factory=list)
    parked_at: float = field(default_factory=time.monotonic)
    cached: list[CachedSlot] = field(default_factory=list)

    @property
    def slots(self) -> int:
        return len(self.entries) + len(self.cached)

    @property
    def tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries) + sum(len(c.tokens) for c in self.cached)

    @property
    def bytes(self) -> int:
        return sum(len(e.state) for e in self.entries)

    def drop(self) -> None:
        self.entries.clear()
        self.cached.clear()


# ------------------------------------------------------------- C calls (decode thread)

def read_seq(ll, ctx, seq_id: int) -> bytearray:
    """The state of one sequence as bytes (one copy, straight into the returned buffer)."""
    size = ll.llama_state_seq_get_size(ctx, seq_id)
    state = bytearray(size)
    if size:
        written = ll.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(state),
                                              size, seq_id)
        if written != size:
            raise EngineError(f"llama_state_seq_get_data wrote {written} of {size} bytes")
    return state


def write_seq(ll, ctx, seq_id: int, state: bytes | bytearray | memoryview) -> bool:
    """Load ``state`` into sequence ``seq_id`` (replacing what it held). False when llama.cpp
    refuses it (other layer count, KV type, or too many cells for the slot); the sequence
    is then empty."""
    size = len(state)
    if not size:
        return False
    if isinstance(state, bytearray):
        buf = (ctypes.c_uint8 * size).from_buffer(state)
    else:
        buf = (ctypes.c_uint8 * size).from_buffer_copy(state)
    return ll.llama_state_seq_set_data(ctx, buf, size, seq_id) > 0


# The four below run on the decode thread, through DecodeLoop.call (``cond`` held).

def park_slots(ll, ctx, loop, parked: ParkedKV) -> None:
    """Append every slot holding tokens to ``parked``."""
    for slot in loop.slots:
        if slot.tokens:
            state = read_seq(ll, ctx, slot.seq_id)
            parked.entries.append(ParkedSlot(slot.seq_id, list(slot.tokens), state,
                                             slot.partition, list(slot.checkpoints)))


def restore_slots(ll, ctx, loop, parked: ParkedKV) -> int:
    """Write each parked slot back into the same sequence, of the partition it was parked
    with, with its context checkpoints; returns the tokens restored. A slot this context
    lacks, one that no longer fits a slot (a smaller rebuild) and one llama.cpp refuses are
    left empty (their conversations prefill again)."""
    restored = 0
    for entry in parked.entries:
        if entry.seq_id >= len(loop.slots) or len(entry.tokens) >= loop.n_ctx_seq:
            continue
        slot = loop.slots[entry.seq_id]
        if slot.job is not None:
            continue
        if write_seq(ll, ctx, slot.seq_id, entry.state):
            slot.tokens[:] = entry.tokens
            slot.partition = entry.partition
            loop.kv_replaced(slot)
            slot.checkpoints[:] = entry.checkpoints
            restored += len(entry.tokens)
        else:
            loop.forget(slot)
    return restored


def export_slot(ll, ctx, loop, slot_or_key: int | str, fingerprint: str,
                layout: KVLayout) -> bytes:
    """A session blob of the slot with index ``slot_or_key`` or bound to that key."""
    slot = next((s for s in loop.slots
                 if (s.seq_id if isinstance(slot_or_key, int) else s.key) == slot_or_key), None)
    if slot is None or not slot.tokens:
        raise SessionNotFound(f"no session {slot_or_key!r} holding tokens")
    if slot.job is not None:
        raise SessionBusy(f"session {slot_or_key!r} is generating")
    return encode_session(list(slot.tokens), fingerprint, layout,
                          read_seq(ll, ctx, slot.seq_id))


def import_slot(ll, ctx, loop, key: str, session: SessionBlob, partition: str = "") -> int:
    """Bind ``key`` to a free slot (its own if already bound) and load the session into it,
    as ``partition``'s tokens (the importer's); returns the tokens cached. A slot is only
    bound once the state is in."""
    was_bound = any(s.key == key for s in loop.slots)
    slot = loop.bind_locked(key, session.tokens, free_only=True, partition=partition)
    if slot is None or slot.job is not None:
        raise SessionBusy(f"no free slot for session {key!r} right now")
    loop.forget(slot)
    if not write_seq(ll, ctx, slot.seq_id, session.state):
        if not was_bound:
            slot.key = None
        raise SessionMismatch("llama.cpp refused the session's KV state")
    slot.tokens[:] = session.tokens
    slot.released_key = key                 # the conversation its KV holds (the cache's tag)
    loop.claim(slot, partition)
    loop.kv_replaced(slot)
    return len(slot.tokens)


# ------------------------------------------------------------------ session blobs

@dataclass
class SessionBlob:
    tokens: list[int]
    fingerprint: str
    layout: dict
    state: memoryview


def encode_session(tokens: list[int], fingerprint: str, layout: KVLayout,
                   state: bytes | bytearray) -> bytes:
    header = json.dumps({"tokens": tokens, "n_tokens": len(tokens), "fingerprint": fingerprint,
                         "layout": layout.as_dict()}, separators=(",", ":")).encode()
    body = b"".join([MAGIC, _HEAD.pack(VERSION, len(header)), header,
                     _STATE_LEN.pack(len(state)), state])
    return body + hashlib.sha256(body).digest()


def decode_session(blob: bytes) -> SessionBlob:
    """Parse and check a blob. Raises SessionCorrupt when it is not an intact version-1 blob;
    says nothing yet about whether it fits this model."""
    view = memoryview(blob)
    fixed = len(MAGIC) + _HEAD.size
    if len(view) < fixed + _STATE_LEN.size + _DIGEST or bytes(view[:len(MAGIC)]) != MAGIC:
        raise SessionCorrupt("not a Hypnos session blob (bad magic or too short)")
    version, header_len = _HEAD.unpack_from(view, len(MAGIC))
    if version != VERSION:
        raise SessionCorrupt(f"session blob version {version}; this server reads {VERSION}")
    body_len = len(view) - _DIGEST
    if hashlib.sha256(view[:body_len]).digest() != bytes(view[body_len:]):
        raise SessionCorrupt("session blob checksum mismatch (corrupt or truncated)")
    state_at = fixed + header_len + _STATE_LEN.size
    if state_at > body_len:
        raise SessionCorrupt("session blob header runs past its end")
    (state_len,) = _STATE_LEN.unpack_from(view, fixed + header_len)
    if state_at + state_len != body_len:
        raise SessionCorrupt("session blob state length does not match its size")
    try:
        header = json.loads(bytes(view[fixed:fixed + header_len]))
        tokens = [int(t) for t in header["tokens"]]
        fingerprint = str(header["fingerprint"])
        layout = dict(header["layout"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SessionCorrupt(f"session blob header unreadable: {exc}") from exc
    if header.get("n_tokens") != len(tokens) or not tokens:
        raise SessionCorrupt("session blob header token count is inconsistent")
    return SessionBlob(tokens, fingerprint, layout, view[state_at:body_len])
