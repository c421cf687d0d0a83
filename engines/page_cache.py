"""Page-cache residency of weight files: tier 2 and tier 3 on a CPU-only host.

Tier 2 (``PinnedWeights``): the files are mapped, advised ``MADV_WILLNEED``, every page is
read once so it is resident, and ``mlock`` is tried so the kernel cannot evict them; a
promotion to tier 1 then reads memory, not disk. ``mlock`` fails under a low
``RLIMIT_MEMLOCK`` (most containers): the pages stay resident as long as memory allows and
``locked`` says False.

Tier 3 (``drop_page_cache``): ``posix_fadvise(DONTNEED)`` asks the kernel to drop the files'
clean pages. The kernel may ignore it (a container's cgroup, pages mapped elsewhere).

Every call here blocks on I/O and may take seconds for large files; call from a worker thread.
Linux only (``mincore``/``mlock`` through libc).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path
from collections.abc import Iterable

import numpy as np

from hypnos.engines.gguf_meta import split_parts

PAGE_SIZE = mmap.PAGESIZE
_MADV_POPULATE_READ = 22          # Linux >= 5.14; faults every page in, one syscall

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def weight_files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Every regular file under ``paths`` (a file, a folder walked recursively, or several),
    sorted, empty files left out; a split GGUF's first part brings its other parts."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    found: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            found.extend(p for p in sorted(item.rglob("*")) if p.is_file())
        elif item.is_file():
            found.extend(p for p in split_parts(item) if p.is_file())
        else:
            raise FileNotFoundError(f"no such weights file or folder: {item}")
    return [p for p in found if p.stat().st_size > 0]


def _address(mm: mmap.mmap) -> int:
    """The mapping's start address. The temporary buffer export is dropped at once so the
    mapping can still be closed."""
    view = np.frombuffer(mm, dtype=np.uint8)
    try:
        return int(view.ctypes.data)
    finally:
        del view


class _Mapping:
    """One file mapped read-only and made resident."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as fh:
            self.size = os.fstat(fh.fileno()).st_size
            self.mm = mmap.mmap(fh.fileno(), self.size, access=mmap.ACCESS_READ)
        self.addr = _address(self.mm)
        self.locked = False

    def populate(self) -> None:
        self.mm.madvise(mmap.MADV_WILLNEED)
        try:
            self.mm.madvise(_MADV_POPULATE_READ)
        except OSError:                      # older kernel: fault each page by reading it
            pages = np.frombuffer(self.mm, dtype=np.uint8)[::PAGE_SIZE]
            int(pages.sum())
            del pages

    def lock(self) -> bool:
        self.locked = _libc.mlock(ctypes.c_void_p(self.addr), ctypes.c_size_t(self.size)) == 0
        return self.locked

    def close(self) -> None:
        if self.locked:
            _libc.munlock(ctypes.c_void_p(self.addr), ctypes.c_size_t(self.size))
            self.locked = False
        self.mm.close()


class PinnedWeights:
    """Weight files held resident in RAM (tier 2). Blocks while it reads them in.

    ``locked`` is True only when every file was mlock'ed; ``lock_error`` holds the errno text
    of the first refusal. ``release()`` unmaps everything and is idempotent.
    """

    def __init__(self, paths: str | Path | Iterable[str | Path], lock: bool = True):
        self.files = weight_files(paths)
        self._maps: list[_Mapping] = []
        self.lock_error: str | None = None
        try:
            for path in self.files:
                mapping = _Mapping(path)
                self._maps.append(mapping)
                mapping.populate()
                if lock and self.lock_error is None and not mapping.lock():
                    self.lock_error = os.strerror(ctypes.get_errno())
        except BaseException:
            self.release()
            raise
        self.locked = bool(self._maps) and all(m.locked for m in self._maps)

    @property
    def bytes(self) -> int:
        return sum(m.size for m in self._maps)

    def release(self) -> None:
        """Unlock and unmap. The pages stay in the page cache until the kernel needs them
        (or ``drop_page_cache`` is called)."""
        while self._maps:
            self._maps.pop().close()
        self.locked = False

    def __enter__(self) -> PinnedWeights:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def drop_page_cache(paths: str | Path | Iterable[str | Path]) -> int:
    """Advise the kernel to drop the files' cached pages (tier 3). Returns the bytes advised.
    Advisory: pages mapped or locked elsewhere stay."""
    total = 0
    for path in weight_files(paths):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def resident_fraction(path: str | Path) -> float:
    """Fraction (0..1) of the file's pages now in the page cache (``mincore``). Mapping the
    file to ask does not read it. An empty file counts as fully resident."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return 1.0
        with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as mm:
            pages = (size + PAGE_SIZE - 1) // PAGE_SIZE
            vec = (ctypes.c_ubyte * pages)()
            rc = _libc.mincore(ctypes.c_void_p(_address(mm)), ctypes.c_size_t(size), vec)
            if rc != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed: {os.strerror(err)}")
            resident = int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1))
    return resident / pages
