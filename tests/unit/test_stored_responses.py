"""The stored responses' SQLite store (service/inference/stored_responses.py): rows by id,
chains rebuilt from parent links, eviction by count, bytes and age (an injected clock), a
restart, linear growth, and a `kill -9` during writes."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from hypnos.service.inference.stored_responses import (DB_NAME, MissingTurn, ResponseStore,
                                                       StoredResponse)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def turn(rid: str, parent: StoredResponse | None = None, *, owner: str = "alice",
         text: str = "hi", answer: str = "hello") -> StoredResponse:
    return StoredResponse(
        rid, owner, "m", parent.conversation if parent is not None else rid,
        parent.id if parent is not None else None,
        [{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
        {"id": rid, "object": "response", "output_text": answer},
        input_items=[{"type": "message", "role": "user", "content": text}],
        depth=parent.depth + 1 if parent is not None else 0)


def chain(store: ResponseStore, prefix: str, n: int, **kw) -> list[StoredResponse]:
    out: list[StoredResponse] = []
    for i in range(n):
        item = turn(f"{prefix}{i}", out[-1] if out else None, **kw)
        assert store.put(item) is None
        out.append(item)
    return out


@pytest.fixture
def store(tmp_path):
    s = ResponseStore(tmp_path / DB_NAME, clock=Clock())
    yield s
    s.close()


def test_put_get_delete_keep_every_field(store):
    first = turn("r1", owner="alice")
    assert store.put(first) is None
    got = store.get("r1")
    assert got is not None and got == first and got.created_at == store.clock()
    assert store.get("nope") is None
    assert store.delete("r1") and not store.delete("r1") and store.get("r1") is None
    assert len(store) == 0 and store.snapshot()["conversations"] == 0


def test_a_chain_is_rebuilt_from_its_parents_and_a_gap_names_the_missing_turn(store):
    a0, a1, a2 = chain(store, "a", 3)
    messages = store.conversation(a2)
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    assert store.conversation(a0) == a0.turn
    store.delete("a1")
    with pytest.raises(MissingTurn) as gone:
        store.conversation(a2)
    assert gone.value.missing == "a1" and gone.value.response_id == "a2"
    assert store.get("a2") is not None               # still readable, only not continuable


def test_count_bound_drops_the_least_recently_continued_conversation_first(tmp_path):
    clock = Clock()
    store = ResponseStore(tmp_path / DB_NAME, max_count=3, clock=clock)
    a0 = turn("a0")
    store.put(a0)
    clock.now += 1
    store.put(turn("b0"))
    clock.now += 1
    a1 = turn("a1", a0)
    store.put(a1)                                    # conversation a is now the newer one
    clock.now += 1
    store.put(turn("c0"))
    assert store.get("b0") is None and len(store) == 3
    assert len(store.conversation(a1)) == 4 and store.snapshot()["evicted"] == 1


def test_byte_bound_drops_the_oldest_turns_and_refuses_one_too_big(tmp_path):
    probe = turn("x0").bytes
    store = ResponseStore(tmp_path / DB_NAME, max_bytes=3 * probe + 10, clock=Clock())
    items = chain(store, "x", 4)
    assert store.get("x0") is None and store.snapshot()["used_bytes"] <= 3 * probe + 10
    with pytest.raises(MissingTurn) as gone:
        store.conversation(items[-1])
    assert gone.value.missing == "x0"
    big = turn("big", text="y" * (4 * probe))
    assert "stored_responses_max_bytes" in (store.put(big) or "")
    assert store.get("big") is None and store.get("x3") is not None
    assert "max_count is 0" in (ResponseStore(None, max_count=0).put(turn("z")) or "")


def test_a_conversation_expires_ttl_after_its_newest_turn(tmp_path):
    clock = Clock()
    store = ResponseStore(tmp_path / DB_NAME, ttl_secs=100, clock=clock)
    a0 = turn("a0")
    store.put(a0)
    store.put(turn("b0"))
    clock.now += 90
    a1 = turn("a1", a0)
    store.put(a1)                                    # keeps a0 alive with its conversation
    clock.now += 20
    assert store.get("b0") is None                   # expired, even before a write purges it
    assert store.get("a0") is not None and len(store.conversation(a1)) == 4
    store.put(turn("c0"))
    assert len(store) == 3 and store.snapshot()["evicted"] == 1
    clock.now += 101
    assert store.get("a1") is None and store.get("c0") is None


def test_responses_survive_a_restart(tmp_path):
    path = tmp_path / "state" / DB_NAME
    first = ResponseStore(path, clock=Clock())
    items = chain(first, "r", 3)
    first.close()
    assert (path.stat().st_mode & 0o777) == 0o600 and (path.parent.stat().st_mode & 0o777) == 0o700
    again = ResponseStore(path, clock=Clock())
    assert again.get("r2") == items[2]
    assert len(again.conversation(items[2])) == 6
    again.close()


def test_the_snapshot_shows_an_owner_only_its_own(store):
    chain(store, "a", 2, owner="alice")
    chain(store, "b", 1, owner="bob")
    everyone = store.snapshot()
    assert [i["id"] for i in everyone["newest"]] == ["b0", "a1", "a0"]
    assert everyone["count"] == 3 and "path" in everyone and "evicted" in everyone
    bob = store.snapshot("bob")
    assert [i["id"] for i in bob["newest"]] == ["b0"] and bob["count"] == 1
    assert "path" not in bob and "evicted" not in bob
    assert store.recency() == {("alice", "a0"): 0, ("bob", "b0"): 1}


def test_a_long_chain_grows_the_file_linearly(tmp_path):
    """Each turn is stored once: 40 turns of ~2 KB cost about 40 turns, not 40*41/2."""
    path = tmp_path / DB_NAME
    store = ResponseStore(path, clock=Clock())

    def size_after(items: list[StoredResponse], n: int) -> int:
        for _ in range(n):
            item = turn(f"t{len(items)}", items[-1] if items else None,
                        text="q" * 1000, answer="a" * 1000)
            assert store.put(item) is None
            items.append(item)
        store.close()                                # checkpoints the WAL into the file
        return path.stat().st_size

    items: list[StoredResponse] = []
    base = size_after(items, 1)
    at20 = size_after(items, 19)
    at40 = size_after(items, 20)
    per_turn = items[0].bytes
    assert (at40 - base) / 39 < 3 * per_turn + 4096
    assert at40 - at20 < 1.5 * (at20 - base)         # quadratic would make it about 3x
    assert len(store.conversation(items[-1])) == 80


CHILD = """
import sys
from pathlib import Path
from hypnos.service.inference.stored_responses import ResponseStore, StoredResponse
store = ResponseStore(Path(sys.argv[1]), max_count=10**6, max_bytes=10**9)
parent = None
for i in range(10**6):
    rid = f"r{i}"
    text = "x" * (i % 700)
    item = StoredResponse(rid, "o", "m", "r0", parent, [{"role": "user", "content": text}],
                          {"id": rid, "n": i}, [{"n": i}], depth=i)
    assert store.put(item) is None
    print(rid, flush=True)
    parent = rid
"""


def test_kill_9_during_writes_leaves_an_intact_file_with_every_reported_row(tmp_path):
    path = tmp_path / DB_NAME
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             env=env, text=True)
    assert child.stdout is not None
    reported = []
    for line in child.stdout:
        reported.append(line.strip())
        if len(reported) == 300:
            break
    child.send_signal(signal.SIGKILL)
    reported += [line.strip() for line in child.stdout if line.strip()]
    child.wait(10)
    assert child.returncode == -signal.SIGKILL and len(reported) >= 300
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store = ResponseStore(path, max_count=10**6, max_bytes=10**9)
    for n, rid in enumerate(reported):
        got = store.get(rid)
        assert got is not None and got.response == {"id": rid, "n": n}
        assert got.turn == [{"role": "user", "content": "x" * (n % 700)}]
    last = store.get(reported[-1])
    assert last is not None and len(store.conversation(last)) == len(reported)
    store.close()


def test_the_state_dir_is_resolved_in_one_place(tmp_path):
    from hypnos.service.config.load import load_config, state_dir
    path = tmp_path / "conf" / "hypnos.toml"
    path.parent.mkdir()
    path.write_text("")
    assert state_dir(load_config(path, env={})) == path.parent / "hypnos-state"
    path.write_text('[server]\nstate_dir = "keep"\n')
    assert state_dir(load_config(path, env={})) == path.parent / "keep"
    path.write_text(f'[server]\nstate_dir = "{tmp_path / "abs"}"\n')
    assert state_dir(load_config(path, env={})) == tmp_path / "abs"
    bare = load_config(None, env={})
    assert state_dir(bare, {"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "hypnos"
    assert state_dir(bare, {"XDG_DATA_HOME": "relative"}).parts[-3:] == (
        ".local", "share", "hypnos")


def test_a_store_that_cannot_open_its_file_keeps_serving_from_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = ResponseStore(blocker / DB_NAME, clock=Clock())
    assert store.put(turn("r0")) is None and store.get("r0") is not None
    assert store.snapshot()["durable"] is False
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is not a database" * 100)
    other = ResponseStore(damaged, clock=Clock())
    assert other.get("r0") is None and other.snapshot()["durable"] is False
    assert damaged.read_bytes() == b"this is not a database" * 100     # left for the operator
