"""Context checkpoints on real models (issue #36 item 2): a prompt that parts from what a slot
holds re-prefills only from the last checkpoint before the parting, on a hybrid model (the
tiny random-weight Qwen3.5: recurrent Gated DeltaNet and attention blocks, whose recurrent
state llama.cpp cannot cut back) and on a sliding-window model whose window cache is not
full-sized (the tiny Gemma 4 with ``swa_full`` off). Before, both re-read the whole prompt
(the hybrid) or would have attended through a window with a hole in it (the window model).

Each check reads the tokens reported cached against the engine's own count of evaluated
positions, and compares the answer with a cold run's under tests/near_tie.py's rule. Gemma 3
270M (the default lineup, a 512-token window, llama.cpp's full-sized window cache) reuses a
prefix longer than its window after a conversation parted, with no checkpoint."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conftest import MODELS_DIR
from near_tie import assert_same_or_a_near_tie
from tiny_gemma4 import write_tiny_gemma4
from tiny_qwen35 import write_tiny_qwen35

from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.engines.llama.checkpoints import TAIL
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.llama.slots import common_prefix
from hypnos.engines.records import ChatRequest, LoadSpec

pytestmark = pytest.mark.real

SYSTEM = "You are a helpful assistant for a small bakery. Answer briefly and politely. " * 20
PICNIC = [{"role": "system", "content": SYSTEM},
          {"role": "user", "content": "What bread do you recommend for a picnic?"}]
GEMMA3 = MODELS_DIR / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory) -> Path:
    return write_tiny_qwen35(tmp_path_factory.mktemp("qwen35") / "tiny-qwen35.gguf")


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory) -> Path:
    return write_tiny_gemma4(tmp_path_factory.mktemp("gemma4") / "tiny-gemma4.gguf")


def spec_for(path: Path, slots: int = 1, **options) -> LoadSpec:
    return LoadSpec(path.stem, path, context_len=4096 * slots, slots=slots, threads=1,
                    options={"n_batch": 256, **options})


def request(messages=None, prompt=None, partition="") -> ChatRequest:
    return ChatRequest(messages=messages or [], prompt=prompt, max_tokens=6, temperature=0,
                       logprobs=True, top_logprobs=2, partition=partition)


def ask(engine, req: ChatRequest):
    """The answer and the positions the engine evaluated for it."""
    before = engine.evaluated_positions
    result = engine.chat(req, None, threading.Event())
    return result, engine.evaluated_positions - before


def held_slot(engine):
    return max(engine._loop.slots, key=lambda s: len(s.tokens))


def best_checkpoint(slot, prompt: list[int]) -> int:
    """The tokens the slot's checkpoints can serve ``prompt`` (at least one is evaluated)."""
    parting = min(common_prefix(slot.tokens, prompt), len(prompt) - 1)
    return max((c.n_tokens for c in slot.checkpoints if c.n_tokens <= parting), default=0)


def check_reuse(engine, spec: LoadSpec, req: ChatRequest, least: int):
    """Ask ``req``: at least ``least`` tokens reused, none of them evaluated, the answer a
    cold run's (the same context rebuilt empty)."""
    kept, evaluated = ask(engine, req)
    assert kept.cached_tokens >= least > 0
    # Only the tail and the answer (its last token is never fed back) were evaluated.
    assert evaluated <= kept.prompt_tokens - kept.cached_tokens + kept.completion_tokens
    engine.load(spec)
    cold, evaluated = ask(engine, req)
    assert cold.cached_tokens == 0 and evaluated >= cold.prompt_tokens
    assert_same_or_a_near_tie(cold, kept)
    return kept


def test_turn_two_of_a_hybrid_conversation_restores_a_checkpoint(qwen35):
    """Turn 2 parts from turn 1 at the assistant header, a few tokens before turn 1's end:
    the checkpoint taken 16 tokens before that end serves it (before: 0 cached)."""
    spec = spec_for(qwen35, slots=2)
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        first, _ = ask(engine, request(PICNIC))
        slot = held_slot(engine)
        n = first.prompt_tokens
        assert {1024, n - TAIL[0], n - TAIL[1]} <= {c.n_tokens for c in slot.checkpoints}
        turn2 = PICNIC + [{"role": "assistant", "content": first.text or "Sourdough."},
                          {"role": "user", "content": "And which cake for a birthday?"}]
        prompt = engine.render_prompt(turn2)
        least = best_checkpoint(slot, prompt)
        assert least >= n - TAIL[0] - 8 > 0.9 * n
        check_reuse(engine, spec, request(turn2), least)
    finally:
        engine.unload()


def test_a_new_hybrid_conversation_with_the_same_system_prompt_reuses_it(qwen35):
    """A second conversation with the same system prompt and a short first message parts
    within the last 64 tokens of the first one's prompt: that checkpoint serves it."""
    spec = spec_for(qwen35, slots=2)
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        ask(engine, request(PICNIC))
        other = [PICNIC[0], {"role": "user", "content": "When do you open on Sundays?"}]
        prompt = engine.render_prompt(other)
        least = best_checkpoint(held_slot(engine), prompt)
        assert least >= 0.9 * common_prefix(held_slot(engine).tokens, prompt)
        check_reuse(engine, spec, request(other), least)
    finally:
        engine.unload()


def test_checkpoints_never_serve_another_partition(qwen35):
    """A slot passing to another partition drops its checkpoints with its KV: the other
    partition's identical prompt is evaluated whole, and what the slot keeps afterwards was
    taken during that prefill."""
    engine = LlamaChatEngine()
    engine.load(spec_for(qwen35, slots=1))
    try:
        ask(engine, request(PICNIC, partition="alice"))
        slot = held_slot(engine)
        theirs = list(slot.checkpoints)  # held, so no new checkpoint can reuse their ids
        assert theirs
        other, evaluated = ask(engine, request(PICNIC, partition="bob"))
        assert other.cached_tokens == 0 and evaluated >= other.prompt_tokens
        assert slot.checkpoints
        assert not any(c is t for c in slot.checkpoints for t in theirs)
        assert all(c.n_tokens < other.prompt_tokens for c in slot.checkpoints)
    finally:
        engine.unload()


def test_the_planners_checkpoint_size_is_llama_cpps(qwen35):
    """The GGUF's ssm keys give the recurrent state llama.cpp snapshots (it adds a small
    header per sequence)."""
    engine = LlamaChatEngine()
    engine.load(spec_for(qwen35))
    try:
        ask(engine, request(PICNIC))
        real = held_slot(engine).checkpoints[0].bytes
        estimate = read_gguf_meta(qwen35).checkpoint_bytes
        assert estimate > 0 and 0 <= real - estimate <= 256
    finally:
        engine.unload()


def test_a_window_model_restores_its_window_from_a_checkpoint(gemma4):
    """Gemma 4 with a window cache of its own size (``swa_full`` off): a prompt parting
    from the slot's further back than the window still held must not reuse the cut KV
    plainly (its window would have a hole); the checkpoint at 1024 tokens serves it."""
    spec = spec_for(gemma4, swa_full=False)
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        loop = engine._loop
        assert loop.checkpointing and loop.n_swa == 512
        ask(engine, request(PICNIC))
        slot = held_slot(engine)
        # Parts about 1080 tokens in: past the checkpoint at 1024, before the window held.
        other = [{"role": "system", "content": SYSTEM[:1250] + "We are closed on Sundays. " * 20},
                 PICNIC[1]]
        prompt = engine.render_prompt(other)
        parting = common_prefix(slot.tokens, prompt)
        pos_min = engine._ll.llama_memory_seq_pos_min(loop.mem, slot.seq_id)
        assert pos_min > parting - loop.n_swa              # the window before it is gone
        least = best_checkpoint(slot, prompt)
        assert least == 1024
        kept = check_reuse(engine, spec, request(other), least)
        # Not a token more: past the checkpoint the window held had a hole (a plain cut
        # of the KV at the parting reused it, and noise weights hardly show the hole).
        assert kept.cached_tokens == least
    finally:
        engine.unload()


def test_a_full_window_cache_takes_no_checkpoint_and_reuses_past_the_window(gemma4):
    """llama.cpp's default full-sized window cache keeps every position: no checkpoint is
    taken and a prefix longer than the window is reused as it is."""
    spec = spec_for(gemma4)
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        assert not engine._loop.checkpointing
        ask(engine, request(PICNIC))
        slot = held_slot(engine)
        assert slot.checkpoints == []
        other = [PICNIC[0], {"role": "user", "content": "When do you open on Sundays?"}]
        parting = common_prefix(slot.tokens, engine.render_prompt(other))
        assert parting > 2 * engine._loop.n_swa
        check_reuse(engine, spec, request(other), parting)
    finally:
        engine.unload()


def test_gemma3_reuses_a_prefix_longer_than_its_window_after_parting():
    """Gemma 3 270M (default lineup; 512-token window): a second prompt sharing about 640
    tokens with the first, then parting, reuses all of them and answers as a cold run."""
    if not GEMMA3.exists():
        pytest.fail(f"{GEMMA3} is missing: run `./run.sh models gemma3:270m` first")
    text = "The bakery on the corner opens at seven and sells bread, cakes and pastries. " * 45
    spec = spec_for(GEMMA3)
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        assert engine._loop.n_swa == 512 and not engine._loop.checkpointing
        first, _ = ask(engine, request(prompt=text + "Tomorrow the bakery will"))
        second = text[:len(text) * 5 // 6] + "On Sundays the bakery is closed, and"
        parting = common_prefix(held_slot(engine).tokens,
                                engine._build(request(prompt=second)).prompt)
        assert parting > engine._loop.n_swa
        check_reuse(engine, spec, request(prompt=second), parting - 1)
    finally:
        engine.unload()


def test_a_rebuilt_context_keeps_a_hybrid_slots_checkpoints(qwen35):
    """A context rebuilt larger (park, load, restore) carries the slot's checkpoints with
    its KV: turn 2 after the rebuild still restores one instead of reading everything."""
    import dataclasses
    spec = spec_for(qwen35)
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        first, _ = ask(engine, request(PICNIC))
        turn2 = PICNIC + [{"role": "assistant", "content": first.text or "Sourdough."},
                          {"role": "user", "content": "And which cake for a birthday?"}]
        least = best_checkpoint(held_slot(engine), engine.render_prompt(turn2))
        parked = engine.park()
        engine.load(dataclasses.replace(spec, context_len=2 * spec.context_len))
        engine.restore(parked)
        assert [c.n_tokens for c in held_slot(engine).checkpoints]
        kept, evaluated = ask(engine, request(turn2))
        assert kept.cached_tokens >= least > 0
        assert evaluated <= kept.prompt_tokens - kept.cached_tokens + kept.completion_tokens
    finally:
        engine.unload()


def test_a_hybrid_prefix_comes_back_from_the_prompt_cache_with_its_checkpoints(qwen35,
                                                                                tmp_path):
    """A hybrid conversation whose slots were taken by two others: its state and checkpoints
    went to the prompt cache's RAM tier, and turn 2 restores them and is cut back to the
    checkpoint before the parting (before the merge of the two: the restore was refused at
    the cut and the slot forgotten, 0 cached)."""
    from hypnos.engines.llama.prompt_cache import PromptCache
    cache = PromptCache(ram_bytes=64 << 20, disk_bytes=0, folder=tmp_path / "prompt-cache")
    spec = spec_for(qwen35, slots=2, prompt_cache=cache)
    engine = LlamaChatEngine()
    engine.load(spec)
    try:
        first, _ = ask(engine, request(PICNIC))
        n = first.prompt_tokens
        for topic in ("a bicycle shop", "a museum of clocks"):
            ask(engine, request([{"role": "system", "content": f"You work at {topic}. " * 60},
                                 {"role": "user", "content": "Hello?"}]))
        turn2 = PICNIC + [{"role": "assistant", "content": first.text or "Sourdough."},
                          {"role": "user", "content": "And which cake for a birthday?"}]
        # The cold run reloads without the cache.
        kept = check_reuse(engine, spec_for(qwen35, slots=2), request(turn2), n - TAIL[0] - 8)
        assert kept.cached_from is not None and kept.cached_from["ram"] == kept.cached_tokens
    finally:
        engine.unload()


def test_a_marked_system_prompt_is_checkpointed_where_it_ends(qwen35):
    """A client's cache mark (Anthropic's cache_control, a prompt_cache_key's instructions:
    ``ChatRequest.cache_marks``) puts a checkpoint where the marked system prompt ends, so a
    new conversation with the same system prompt and a long first message re-reads only its
    own message. Without the mark no checkpoint lies that early (the tail ones sit near the
    end of the first prompt, and it is shorter than the 1,024-token grid): nothing reused."""
    system = {"role": "system", "content": "You are the bakery's assistant. " * 12}
    long_ask = " ".join(["Tell me about the rye, the spelt and the sourdough loaves."] * 5)

    def first_then_second(marks: tuple[int, ...]):
        engine = LlamaChatEngine()
        engine.load(spec_for(qwen35, slots=1))
        try:
            req = request([system, {"role": "user", "content": long_ask}])
            req.cache_marks = marks
            first, _ = ask(engine, req)
            assert first.prompt_tokens < 1024
            other = request([system, {"role": "user", "content": "Hi! " + long_ask}])
            # Where the two prompts part: the system prompt and the user turn's header.
            end_of_system = common_prefix(engine.render_prompt(req.messages),
                                          engine.render_prompt(other.messages))
            second, evaluated = ask(engine, other)
            return second, evaluated, end_of_system
        finally:
            engine.unload()

    marked, evaluated, end_of_system = first_then_second((0,))
    assert end_of_system - 8 <= marked.cached_tokens <= end_of_system
    assert evaluated <= marked.prompt_tokens - marked.cached_tokens + marked.completion_tokens
    unmarked, _, _ = first_then_second(())
    assert unmarked.cached_tokens < 64
