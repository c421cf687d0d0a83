"""Tier 2 / tier 3 residency helpers on real temp files (Linux page cache)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from hypnos.engines.page_cache import (
    PinnedWeights, drop_page_cache, resident_fraction, weight_files,
)

MB = 1024 * 1024


@pytest.fixture
def weights_dir(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(os.urandom(3 * MB))
    (tmp_path / "sub" / "b.bin").write_bytes(os.urandom(MB + 123))
    (tmp_path / "empty.bin").write_bytes(b"")
    return tmp_path


def test_pin_a_file_makes_it_resident(weights_dir: Path):
    path = weights_dir / "a.bin"
    with PinnedWeights(path) as pinned:
        assert pinned.bytes == 3 * MB
        assert isinstance(pinned.locked, bool)
        assert pinned.locked or pinned.lock_error      # refusal is recorded, not raised
        assert resident_fraction(path) > 0.99
    assert pinned.bytes == 0
    assert pinned.locked is False


def test_pin_a_folder_maps_every_nonempty_file(weights_dir: Path):
    pinned = PinnedWeights(weights_dir, lock=False)
    try:
        assert [p.name for p in pinned.files] == ["a.bin", "b.bin"]
        assert pinned.bytes == 4 * MB + 123
        assert pinned.locked is False
        assert resident_fraction(weights_dir / "sub" / "b.bin") > 0.99
    finally:
        pinned.release()
    pinned.release()                                   # idempotent


def test_drop_page_cache_runs_on_files_and_folders(weights_dir: Path):
    # Containers may not honour DONTNEED, so only the call itself is checked.
    assert drop_page_cache(weights_dir / "a.bin") == 3 * MB
    assert drop_page_cache(weights_dir) == 4 * MB + 123
    assert 0.0 <= resident_fraction(weights_dir / "a.bin") <= 1.0


def test_missing_path_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nope"):
        weight_files(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        PinnedWeights(tmp_path / "nope")


def test_empty_file_counts_as_resident(weights_dir: Path):
    assert resident_fraction(weights_dir / "empty.bin") == 1.0
