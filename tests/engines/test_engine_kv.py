"""KV parking and sessions on LlamaChatEngine (real SmolLM2-135M), and the session blob
format (pure)."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from conftest import SMOLLM2, require_smollm2

from hypnos.engines.errors import SessionCapacity, SessionCorrupt, SessionMismatch, SessionNotFound
from hypnos.engines.records import ChatRequest, LoadSpec
from hypnos.engines.llama.state import (
    KVLayout, ParkedKV, ParkedSlot, decode_session, encode_session, weights_fingerprint,
)

# The default lineup's SmolLM2 (./run.sh test pulls it; a missing file fails, never skips).
MODEL = SMOLLM2


def real(test):
    """Runs on the real SmolLM2 GGUF."""
    return pytest.mark.real(test)


# One thread: see tests/engines/test_engine_llama.py (ggml workers spin when the cores are shared).
SPEC = LoadSpec("smollm2", MODEL, context_len=4096, slots=2, threads=1)
SYSTEM = {"role": "system", "content": "You are the assistant of a small bakery. You answer "
          "questions about bread, cakes, opening hours and prices, politely and briefly. " * 18}
TURN1 = [SYSTEM, {"role": "user", "content": "What bread do you recommend for a picnic?"}]
LAYOUT = KVLayout(n_ctx=4096, slots=2, n_ctx_per_slot=2048, type_k=1, type_v=1, flash_attn=-1,
                  kv_unified=False)


def ask(engine, messages, max_tokens=12, **kw):
    return engine.chat(ChatRequest(messages=messages, max_tokens=max_tokens, temperature=0,
                                   **kw), None, threading.Event())


def turn2(first_answer: str) -> list[dict]:
    return TURN1 + [{"role": "assistant", "content": first_answer},
                    {"role": "user", "content": "And which cake for a birthday?"}]


@pytest.fixture(scope="module")
def engine():
    require_smollm2()
    from hypnos.engines.llama.engine import LlamaChatEngine
    eng = LlamaChatEngine()
    eng.load(SPEC)
    yield eng
    eng.unload()


@pytest.fixture(scope="module")
def baseline(engine):
    """Both turns on one engine with no swap: (turn-1 result, turn-2 result)."""
    first = ask(engine, TURN1)
    assert first.prompt_tokens > 450
    second = ask(engine, turn2(first.text))
    assert second.cached_tokens >= first.prompt_tokens
    return first, second


# --------------------------------------------------------------------------- parking

@real
def test_parked_conversation_continues_after_a_swap(engine, baseline):
    first, second = baseline
    engine.load(SPEC)                               # a fresh context, nothing cached
    again = ask(engine, TURN1)
    assert again.text == first.text
    parked = engine.park()
    assert parked.slots == 1 and parked.bytes > 1_000_000
    assert parked.tokens >= first.prompt_tokens
    assert parked.layout == engine.layout and parked.fingerprint == engine.fingerprint
    n_parked = parked.tokens
    engine.unload()
    engine.load(SPEC)
    restored, ms = engine.restore(parked)
    assert restored == n_parked and ms > 0
    assert parked.bytes == 0                        # single use
    after = ask(engine, turn2(first.text))
    assert after.cached_tokens >= n_parked
    assert after.text == second.text


@real
def test_restore_into_another_layout_drops_what_does_not_fit_and_changes_no_answer(
        engine, baseline):
    """A context of another size takes parked slots of the same KV types that fit its
    slots (a rebuild keeps them: tests/engines/test_prefix_kept.py); a slot longer than
    the new slot size, or beyond the new slot count, is dropped and its conversation
    prefills as cold."""
    first, _ = baseline
    engine.load(SPEC)
    ask(engine, TURN1)
    parked = engine.park()
    spare = dataclasses.replace(parked, entries=list(parked.entries))
    engine.load(dataclasses.replace(SPEC, context_len=512))    # 256 a slot: too small
    assert engine.restore(spare)[0] == 0
    assert spare.bytes == 0                                      # dropped
    gone = [dataclasses.replace(e, seq_id=5) for e in parked.entries]
    fewer = dataclasses.replace(SPEC, slots=1, context_len=2048)  # same per-slot context
    engine.load(fewer)
    assert engine.restore(dataclasses.replace(parked, entries=gone))[0] == 0
    refused = ask(engine, turn2(first.text))
    assert refused.cached_tokens == 0
    engine.load(fewer)                              # the same layout, never parked
    cold = ask(engine, turn2(first.text))
    assert refused.text == cold.text
    engine.load(SPEC)


@real
def test_restore_refuses_other_weights(engine):
    engine.load(SPEC)
    ask(engine, [{"role": "user", "content": "Say hi."}], max_tokens=2)
    parked = engine.park()
    forged = dataclasses.replace(parked, fingerprint="1:2:" + "0" * 64)
    assert engine.restore(forged) == (0, 0.0)
    assert engine.restore(ParkedKV("x", engine.layout, engine.fingerprint)) == (0, 0.0)


@real
def test_park_with_nothing_cached_is_none(engine):
    engine.load(SPEC)
    assert engine.park() is None


# --------------------------------------------------------------------------- sessions

@real
def test_session_export_release_import_continues(engine, baseline):
    first, second = baseline
    engine.load(SPEC)
    ask(engine, TURN1, session_key="alice")
    assert engine.sessions() == {"alice": pytest.approx(first.prompt_tokens, abs=20)}
    blob = engine.export_session("alice")
    assert engine.release_session("alice") is True
    assert engine.release_session("alice") is False         # idempotent
    engine.load(SPEC)                                          # nothing cached any more
    n = engine.import_session(blob, "bob")
    assert n >= first.prompt_tokens
    assert engine.sessions() == {"bob": n}
    after = ask(engine, turn2(first.text), session_key="bob")
    assert after.cached_tokens >= first.prompt_tokens
    assert after.text == second.text
    corrupt = bytearray(blob)
    corrupt[len(corrupt) // 2] ^= 0xFF
    for bad in (bytes(corrupt), blob[:-100], b"NOTHYPNO" + blob[8:], b""):
        with pytest.raises(SessionCorrupt):
            engine.import_session(bad, "carol")
    session = decode_session(blob)
    other_weights = encode_session(session.tokens, "1:2:" + "0" * 64,
                                   engine.layout, session.state)
    with pytest.raises(SessionMismatch):
        engine.import_session(other_weights, "carol")
    too_long = encode_session(session.tokens * 5, engine.fingerprint, engine.layout,
                              session.state)
    with pytest.raises(SessionMismatch):
        engine.import_session(too_long, "carol")
    assert "carol" not in engine.sessions()
    with pytest.raises(SessionNotFound):
        engine.export_session("nobody")


@real
def test_session_keeps_its_slot_against_unrelated_requests(engine):
    engine.load(SPEC)
    ask(engine, TURN1, max_tokens=2, session_key="alice")
    # Two unrelated conversations in a row: without the binding, the second would take the
    # least recently used slot, which holds alice's conversation.
    ask(engine, [{"role": "user", "content": "Name a colour."}], max_tokens=2)
    ask(engine, [{"role": "user", "content": "Name an animal."}], max_tokens=2)
    again = ask(engine, TURN1, max_tokens=2, session_key="alice")
    assert again.cached_tokens == again.prompt_tokens - 1


@real
def test_session_capacity(engine):
    engine.load(SPEC)
    hi = [{"role": "user", "content": "Say hi."}]
    ask(engine, hi, max_tokens=1, session_key="a")
    ask(engine, hi, max_tokens=1, session_key="b")
    with pytest.raises(SessionCapacity):
        ask(engine, hi, max_tokens=1, session_key="c")
    assert ask(engine, hi, max_tokens=1).completion_tokens == 1    # unkeyed still served
    engine.release_session("a")
    assert ask(engine, hi, max_tokens=1, session_key="c").completion_tokens == 1
    assert set(engine.sessions()) == {"b", "c"}
    assert engine.max_sessions == 2


@real
def test_a_cache_hint_session_gives_its_slot_to_a_new_one(engine):
    """Sessions named by a cache hint (prompt_cache_key, X-Session-Id: ``session_yields``)
    do not reserve slots: with every slot bound, a new one takes the slot of the one idle
    longest instead of a 429, and that one comes back as a new binding. A session named by
    session_id keeps its slot (``test_session_capacity``), also against hinted ones."""
    engine.load(SPEC)
    for key in list(engine.sessions()):
        engine.release_session(key)
    hi = [{"role": "user", "content": "Say hi."}]
    ask(engine, hi, max_tokens=1, session_key="codex-1", session_yields=True)
    ask(engine, hi, max_tokens=1, session_key="codex-2", session_yields=True)
    assert ask(engine, hi, max_tokens=1, session_key="codex-3",
               session_yields=True).completion_tokens == 1
    assert set(engine.sessions()) == {"codex-2", "codex-3"}      # codex-1 was idle longest
    assert ask(engine, hi, max_tokens=1, session_key="codex-1",
               session_yields=True).completion_tokens == 1
    assert set(engine.sessions()) == {"codex-3", "codex-1"}
    # A session_id binding never gives way; the hinted one beside it does.
    ask(engine, hi, max_tokens=1, session_key="pinned")
    assert set(engine.sessions()) == {"pinned", "codex-1"}
    ask(engine, hi, max_tokens=1, session_key="codex-4", session_yields=True)
    assert set(engine.sessions()) == {"pinned", "codex-4"}
    ask(engine, hi, max_tokens=1, session_key="pinned-2")     # takes the hinted one's
    assert set(engine.sessions()) == {"pinned", "pinned-2"}
    with pytest.raises(SessionCapacity):
        ask(engine, hi, max_tokens=1, session_key="codex-5", session_yields=True)
    for key in list(engine.sessions()):
        engine.release_session(key)


@real
def test_parked_and_imported_kv_serve_only_their_partition(engine):
    """Issue 35: parked KV comes back as its key's, an imported session as the importer's;
    another key's request on that slot evaluates its whole prompt."""
    engine.load(SPEC)
    ask(engine, TURN1[1:], max_tokens=2, partition="alice", session_key="s")
    blob = engine.export_session("s")
    engine.release_session("s")
    parked = engine.park()
    assert [e.partition for e in parked.entries] == ["alice"]
    engine.load(SPEC)
    engine.restore(parked)
    mine = ask(engine, TURN1[1:], max_tokens=2, partition="alice")
    assert mine.cached_tokens == mine.prompt_tokens - 1
    engine.load(SPEC)
    engine.import_session(blob, "s", "bob")
    his = ask(engine, TURN1[1:], max_tokens=2, partition="bob", session_key="s")
    assert his.cached_tokens == his.prompt_tokens - 1
    engine.load(SPEC)
    engine.import_session(blob, "s", "bob")
    hers = ask(engine, TURN1[1:], max_tokens=2, partition="alice", session_key="s")
    assert hers.cached_tokens == 0


# --------------------------------------------------------------------------- pure

def test_blob_round_trip_and_damage():
    state = bytes(range(256)) * 40
    blob = encode_session([1, 2, 3], "9:9:abc", LAYOUT, state)
    got = decode_session(blob)
    assert (got.tokens, got.fingerprint, got.layout) == ([1, 2, 3], "9:9:abc", LAYOUT.as_dict())
    assert bytes(got.state) == state
    for cut in (0, 7, 20, len(blob) - 1):
        with pytest.raises(SessionCorrupt):
            decode_session(blob[:cut])
    flipped = bytearray(blob)
    flipped[30] ^= 1
    with pytest.raises(SessionCorrupt, match="checksum"):
        decode_session(bytes(flipped))
    newer = bytearray(blob)
    newer[8] = 2
    with pytest.raises(SessionCorrupt, match="version"):
        decode_session(bytes(newer))


def test_layout_accepts_sessions_that_fit_a_slot():
    layout = LAYOUT.as_dict()
    assert LAYOUT.accepts_session(layout, 2047)
    assert not LAYOUT.accepts_session(layout, 2048)
    assert not LAYOUT.accepts_session({**layout, "type_k": 8}, 10)
    # Slot count and total context may differ for a session.
    assert LAYOUT.accepts_session({**layout, "slots": 4, "n_ctx": 8192}, 10)


def test_parked_kv_totals():
    parked = ParkedKV("m", LAYOUT, "f", [ParkedSlot(0, [1, 2], bytearray(10)),
                                        ParkedSlot(1, [3], bytearray(5))])
    assert (parked.slots, parked.tokens, parked.bytes) == (2, 3, 15)
    parked.drop()
    assert (parked.slots, parked.tokens, parked.bytes) == (0, 0, 0)


def test_fingerprint_changes_with_content(tmp_path):
    a = tmp_path / "a.gguf"
    a.write_bytes(b"GGUF" + b"\0" * 100)
    first = weights_fingerprint(a)
    assert first == weights_fingerprint(a)
    a.write_bytes(b"GGUF" + b"\1" * 100)
    assert weights_fingerprint(a).split(":")[2] != first.split(":")[2]
