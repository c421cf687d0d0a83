"""The prompt cache's files (tier 3): one cached prefix per file, checked whole before use.

Layout (little-endian)::

    b"HYPNOSPC" | u32 version | u32 header length | header JSON | u64 state length | state
    | u32 checkpoint count | (u64 n_tokens | u64 length | bytes) per checkpoint
    | sha256 of everything before it (32 bytes)

The header is ``{"identity", "model", "partition", "session", "tokens", "created",
"last_used"}``; ``identity`` names the weights, the KV types and the llama.cpp state format
(`cache_identity`), so a file made under anything else is never loaded. ``read_header``
reads only the header (the index is rebuilt from it at start); ``read_entry`` reads and
checks everything. Both raise `CorruptEntry` for anything that is not an intact file of this
version; the caller deletes it. Files are written by the cache's writer thread only, never on
the decode thread, created 0600 under a temporary name and renamed into place.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"HYPNOSPC"
VERSION = 1
SUFFIX = ".hpc"
_HEAD = struct.Struct("<II")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_PAIR = struct.Struct("<QQ")
_DIGEST = 32


class CorruptEntry(Exception):
    """Not an intact prompt-cache file of this version (bad magic, checksum, lengths)."""


@dataclass
class FileHeader:
    identity: str
    model: str
    partition: str
    session: str | None
    tokens: list[int]
    created: float
    last_used: float


def cache_identity(fingerprint: str, layout: dict, state_format: str) -> str:
    """One string for what a cached state needs to load as is: the weights
    (``weights_fingerprint``), the KV types and kernel (not the context size: a state loads
    into any slot it fits), and the llama.cpp state format (its version and the size of an
    empty sequence's state, which also tells the KV stream count a state must match: one per
    slot)."""
    kv = {k: layout.get(k) for k in ("type_k", "type_v", "flash_attn", "kv_unified")}
    blob = json.dumps([fingerprint, kv, state_format], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def encode(header: FileHeader, state: bytes | bytearray,
           checkpoints: list[tuple[int, bytes]]) -> list[bytes | bytearray | memoryview]:
    """The file's parts, in order (the last one the digest of the others)."""
    head = json.dumps({"identity": header.identity, "model": header.model,
                       "partition": header.partition, "session": header.session,
                       "tokens": header.tokens, "created": header.created,
                       "last_used": header.last_used}, separators=(",", ":")).encode()
    parts: list[bytes | bytearray | memoryview] = [
        MAGIC, _HEAD.pack(VERSION, len(head)), head, _U64.pack(len(state)), state,
        _U32.pack(len(checkpoints))]
    for n_tokens, data in checkpoints:
        parts += [_PAIR.pack(n_tokens, len(data)), data]
    digest = hashlib.sha256()
    for p in parts:
        digest.update(p)
    parts.append(digest.digest())
    return parts


def write_file(path: Path, parts: list[bytes | bytearray | memoryview]) -> int:
    """Write ``parts`` to ``path`` (mode 0600) through a temporary file renamed into place;
    the bytes written. Blocks on the disk."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            for p in parts:
                f.write(p)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return sum(len(p) for p in parts)


def _header_of(raw: bytes) -> tuple[FileHeader, int]:
    """The header and the offset of the state length field."""
    fixed = len(MAGIC) + _HEAD.size
    if len(raw) < fixed or raw[:len(MAGIC)] != MAGIC:
        raise CorruptEntry("not a prompt-cache file (bad magic or too short)")
    version, head_len = _HEAD.unpack_from(raw, len(MAGIC))
    if version != VERSION:
        raise CorruptEntry(f"prompt-cache file version {version}; this server reads {VERSION}")
    if len(raw) < fixed + head_len:
        raise CorruptEntry("prompt-cache header runs past the end of the file")
    try:
        h = json.loads(raw[fixed:fixed + head_len])
        header = FileHeader(str(h["identity"]), str(h["model"]), str(h["partition"]),
                            None if h["session"] is None else str(h["session"]),
                            [int(t) for t in h["tokens"]], float(h["created"]),
                            float(h["last_used"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptEntry(f"prompt-cache header unreadable: {exc}") from exc
    if not header.tokens:
        raise CorruptEntry("prompt-cache header holds no tokens")
    return header, fixed + head_len


def read_header(path: Path) -> FileHeader:
    """The header alone (the index is built from it); the file is checked whole on use."""
    with open(path, "rb") as f:
        start = f.read(len(MAGIC) + _HEAD.size)
        if len(start) < len(MAGIC) + _HEAD.size:
            raise CorruptEntry("prompt-cache file too short")
        _, head_len = _HEAD.unpack_from(start, len(MAGIC))
        if head_len > 64 << 20:
            raise CorruptEntry("prompt-cache header length is implausible")
        return _header_of(start + f.read(head_len))[0]


def read_entry(path: Path) -> tuple[FileHeader, bytearray, list[tuple[int, bytes]]]:
    """Header, state and checkpoints of an intact file. Raises CorruptEntry (checksum,
    lengths) and OSError (unreadable). Blocks on one read of the whole file."""
    raw = path.read_bytes()
    if len(raw) < _DIGEST:
        raise CorruptEntry("prompt-cache file too short")
    body = memoryview(raw)[:-_DIGEST]
    if hashlib.sha256(body).digest() != raw[-_DIGEST:]:
        raise CorruptEntry("prompt-cache file checksum mismatch (corrupt or truncated)")
    header, at = _header_of(raw)
    try:
        (state_len,) = _U64.unpack_from(body, at)
        at += _U64.size
        state = bytearray(body[at:at + state_len])
        at += state_len
        (count,) = _U32.unpack_from(body, at)
        at += _U32.size
        checkpoints = []
        for _ in range(count):
            n_tokens, size = _PAIR.unpack_from(body, at)
            at += _PAIR.size
            checkpoints.append((n_tokens, bytes(body[at:at + size])))
            at += size
    except struct.error as exc:
        raise CorruptEntry(f"prompt-cache file lengths do not add up: {exc}") from exc
    if at != len(body) or len(state) != state_len:
        raise CorruptEntry("prompt-cache file lengths do not add up")
    return header, state, checkpoints
