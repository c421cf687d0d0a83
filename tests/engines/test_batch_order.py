"""The decode loop writes each step's batch in sequence order, whatever the room order (single
tokens get the batch's room first). llama.cpp cuts a batch over several KV streams into
ubatches of consecutive sequence ids, one forward pass each: two decoders on slots 1 and 2
written before a prompt chunk on slot 0 would cost a pass more every step. The batch is
filled by the loop of an engine on the tiny generated llama and read back, not decoded."""
import threading

import pytest

from conftest import require_smollm2
from tiny_llama import load_tiny_engine
from hypnos.engines.llama.slots import Job, Slot

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    eng = load_tiny_engine(tmp_path_factory.mktemp("order"), require_smollm2(), slots=3,
                           threads=1)
    yield eng._loop
    eng.unload()


def slot(seq_id: int, pending: int) -> Slot:
    """A slot (not one of the loop's) whose job has ``pending`` tokens to evaluate."""
    job = Job(prompt=[5] * pending, max_tokens=8, sampling=None, stop=threading.Event())
    job.pending = list(range(100, 100 + pending))
    return Slot(seq_id=seq_id, tokens=[7] * 3, job=job)


def batch_seqs(loop) -> list[int]:
    return [loop.batch.seq_id[i][0] for i in range(loop.batch.n_tokens)]


def test_a_prompt_chunk_on_a_lower_slot_is_written_before_the_decoders(loop):
    decoders, prompt = [slot(1, 1), slot(2, 1)], slot(0, 300)
    entries = loop._fill_batch(decoders + [prompt])
    assert batch_seqs(loop) == [0] * 300 + [1, 2]
    assert [(s.seq_id, taken) for s, taken, *_ in entries] == [(0, 300), (1, 1), (2, 1)]
    at = {s.seq_id: logits_at for s, _, logits_at, _ in entries}
    assert at == {0: 299, 1: 300, 2: 301}         # each last token's logits, where it lies
    assert [loop.batch.logits[i] for i in (298, 299, 300, 301)] == [0, 1, 1, 1]


def test_the_room_still_goes_to_single_tokens_first(loop):
    """A chunk longer than the batch leaves room for every decoder; written in order."""
    decoders, prompt = [slot(2, 1), slot(1, 1)], slot(0, loop.n_batch + 50)
    entries = loop._fill_batch([prompt] + decoders)
    taken = {s.seq_id: n for s, n, *_ in entries}
    assert taken == {0: loop.n_batch - 2, 1: 1, 2: 1}
    seqs = batch_seqs(loop)
    assert seqs == sorted(seqs) and len(seqs) == loop.n_batch
    assert entries[0][2] is None                   # the chunk: not its last token, no logits
