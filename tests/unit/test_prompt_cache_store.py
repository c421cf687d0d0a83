"""The prompt cache's store (`engines.llama.prompt_cache`), without a model: its bounds, its
eviction order, its files (rebuilt at start, checked before use, dropped when corrupt or
made under another identity), partitions and sessions."""
from __future__ import annotations

import stat

import pytest

from hypnos.engines.llama import prompt_cache_file as files
from hypnos.engines.llama.prompt_cache import PromptCache
from hypnos.engines.llama.prompt_cache_entries import Entry, eviction_order, score
from hypnos.planner.budgets import prompt_cache_caps

KIB = 1024


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def state(n: int, fill: int = 7) -> bytearray:
    return bytearray([fill]) * n


def tokens(start: int, n: int = 300) -> list[int]:
    return list(range(start, start + n))


def test_eviction_weighs_recency_size_and_hits():
    now = 10_000.0
    old = Entry("i", "m", "p", [1], 1 * KIB, last_used=now - 3600)
    fresh = Entry("i", "m", "p", [1], 1 * KIB, last_used=now)
    big = Entry("i", "m", "p", [1], 512 * KIB * KIB, last_used=now)
    hit = Entry("i", "m", "p", [1], 1 * KIB, last_used=now - 3600, hits=50)
    assert score(old, now) < score(fresh, now)
    assert score(big, now) < score(fresh, now)
    assert score(hit, now) > score(old, now)
    assert eviction_order([fresh, hit, old, big], now)[0] is old


def test_ram_tier_stays_under_its_bytes_without_a_folder():
    clock = Clock()
    cache = PromptCache(ram_bytes=10 * KIB, clock=clock)
    for i in range(8):
        clock.t += 1
        cache.put("m", "id", "p", tokens(1000 * i), state(3 * KIB), [], None)
        assert cache.ram_used <= 10 * KIB
    # The most recent ones stay.
    assert cache.best("id", "p", tokens(7000)) is not None
    assert cache.best("id", "p", tokens(0)) is None
    assert cache.put("m", "id", "p", tokens(1), state(11 * KIB), [], None) is None


def test_spill_to_disk_and_disk_bound(tmp_path):
    clock = Clock()
    folder = tmp_path / "prompt-cache"
    cache = PromptCache(ram_bytes=8 * KIB, disk_bytes=20 * KIB, folder=folder, clock=clock)
    cache.attach("m", "id")
    for i in range(10):
        clock.t += 1
        cache.put("m", "id", "p", tokens(1000 * i), state(3 * KIB), [(5, b"ck")], None)
        assert cache.flush()
        assert cache.ram_used <= 8 * KIB
        assert cache.disk_used <= 20 * KIB + 2 * KIB       # header bytes beside the states
    on_disk = [p for p in folder.iterdir()]
    assert 0 < len(on_disk) <= 7
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in on_disk)
    # An entry only on disk loads from there, with its checkpoints.
    disk_only = [e for e in cache.entries if e.state is None and e.path is not None]
    assert disk_only
    got = cache.load(disk_only[0])
    assert got is not None and got[2] == "disk" and got[1] == [(5, b"ck")]
    assert got[0] == state(3 * KIB)


def test_shrink_ram_makes_room_for_a_load(tmp_path):
    cache = PromptCache(ram_bytes=64 * KIB, disk_bytes=1 << 20, folder=tmp_path / "pc")
    cache.attach("m", "id")
    for i in range(4):
        cache.put("m", "id", "p", tokens(1000 * i), state(8 * KIB), [], None)
    cache.flush()
    freed = cache.shrink_ram(10 * KIB)
    assert cache.ram_used <= 10 * KIB and freed >= 22 * KIB
    assert len(cache.entries) == 4                  # on disk still


def test_restart_rebuilds_the_index_and_age_drops(tmp_path):
    clock = Clock()
    folder = tmp_path / "pc"
    first = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=folder, clock=clock)
    first.attach("m", "id")
    first.put("m", "id", "alice", tokens(5), state(2 * KIB), [], "sess-1")
    first.close()
    again = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=folder, clock=clock,
                        max_age_secs=3600)
    again.attach("m", "id")
    found = again.best("id", "alice", tokens(5, 400))
    assert found is not None and found[1] == 300
    loaded = again.load(found[0])
    assert loaded is not None and loaded[2] == "disk" and loaded[0] == state(2 * KIB)
    clock.t += 7200
    again.put("m", "id", "alice", tokens(90_000), state(KIB), [], None)   # applies the bounds
    assert again.best("id", "alice", tokens(5)) is None
    assert len(list(folder.glob("*.hpc"))) <= 1


def test_corrupt_and_mismatched_files_are_dropped(tmp_path):
    folder = tmp_path / "pc"
    cache = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=folder)
    cache.attach("m", "id-1")
    cache.attach("other", "id-x")
    cache.put("m", "id-1", "p", tokens(0), state(4 * KIB), [], None)
    cache.put("m", "id-1", "p", tokens(5000), state(4 * KIB), [], None)
    cache.put("other", "id-x", "p", tokens(0), state(4 * KIB), [], None)
    cache.close()
    by_start = {files.read_header(p).tokens[0]: p for p in folder.glob("*.hpc")
                if files.read_header(p).model == "m"}
    raw = bytearray(by_start[5000].read_bytes())
    raw[-100] ^= 0xFF                              # a flipped bit in the state
    by_start[5000].write_bytes(raw)
    (folder / "junk.hpc").write_bytes(b"not a cache file")

    # The weights of "m" changed: its entries go; "other"'s stay; junk goes at the scan.
    again = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=folder)
    again.attach("m", "id-2")
    assert not (folder / "junk.hpc").exists()
    assert not by_start[0].exists() and not by_start[5000].exists()
    assert again.best("id-x", "p", tokens(0)) is not None

    # A corrupt file under the right identity is deleted at use, never loaded.
    third = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=folder)
    third.attach("m", "id-1")
    third.put("m", "id-1", "p", tokens(7000), state(4 * KIB), [], None)
    third.flush()
    entry = third.best("id-1", "p", tokens(7000))[0]
    entry.state = None                             # only its file is left
    raw = bytearray(entry.path.read_bytes())
    raw[-40] ^= 0x01
    entry.path.write_bytes(raw)
    path = entry.path
    assert third.load(entry) is None
    assert not path.exists() and entry not in third.entries


def test_one_partition_never_gets_anothers_entry():
    cache = PromptCache(ram_bytes=1 << 20)
    cache.put("m", "id", "alice", tokens(0), state(KIB), [], None)
    assert cache.best("id", "bob", tokens(0)) is None
    assert cache.best("id", "alice", tokens(0)) is not None
    assert cache.best("id-other-weights", "alice", tokens(0)) is None


def test_a_longer_copy_replaces_the_shorter_and_sessions_drop(tmp_path):
    cache = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=tmp_path / "pc")
    cache.attach("m", "id")
    cache.put("m", "id", "p", tokens(0, 300), state(KIB), [], "s1")
    cache.put("m", "id", "p", tokens(0, 400), state(KIB), [], "s1")
    assert len(cache.entries) == 1 and cache.holds("id", "p", tokens(0, 350))
    cache.put("m", "id", "p", tokens(9000), state(KIB), [], "s2")
    cache.flush()
    assert cache.drop_session("s1") == 1
    assert cache.best("id", "p", tokens(0)) is None
    assert len(list((tmp_path / "pc").glob("*.hpc"))) == 1


@pytest.mark.parametrize("ram,disk,machine,want", [
    (None, None, 16 << 30, (1 << 30, 4 << 30)),
    (None, None, 64 << 30, (2 << 30, 4 << 30)),
    (5, 0, 64 << 30, (5, 0)),
])
def test_default_caps(ram, disk, machine, want):
    assert prompt_cache_caps(ram, disk, machine) == want


@pytest.mark.parametrize("a,b", [([], []), ([1, 2, 3], [1, 2, 3]), ([1, 2, 3], [1, 2]),
                                 ([1, 2, 3, 4, 5], [1, 2, 9, 4, 5]), ([7], [8]),
                                 (list(range(1000)), list(range(999)) + [5])])
def test_common_prefix(a, b):
    from hypnos.engines.llama.prompt_cache_entries import common_prefix
    pairs = enumerate(zip(a, b, strict=False))
    want = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
    assert common_prefix(a, b) == common_prefix(b, a) == want


def test_fetch_reads_a_disk_entry_into_ram_and_the_hit_counts_as_disk(tmp_path):
    cache = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=tmp_path / "pc")
    cache.attach("m", "id")
    entry = cache.put("m", "id", "p", tokens(0), state(KIB), [], None)
    cache.flush()
    entry.state = None
    cache.fetch("id", "p", tokens(0, 400))
    assert entry.state == state(KIB)
    got = cache.load(entry)
    assert got is not None and got[2] == "disk"
    assert cache.load(entry)[2] == "ram"
    row = cache.snapshot()["models"][0]
    assert row["disk"]["hits"] == 1 and row["ram"]["hits"] == 1
