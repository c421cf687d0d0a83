"""bench/synthetic_gguf.py: the sized random-weight llama GGUFs the GPU check writes on the
device. Architecture, tensor shapes and size as asked, and llama.cpp and Hypnos both read it."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import synthetic_gguf as syn  # noqa: E402

MIB, GIB = 2**20, 2**30


@pytest.mark.parametrize("size", [10 * MIB, GIB, 8 * GIB])
def test_the_shape_comes_close_to_the_size_from_below(size):
    s = syn.shape_for(size)
    assert s.layers >= 2
    assert 0.85 * size <= s.file_bytes() <= size


def test_larger_sizes_take_wider_families():
    assert [syn.shape_for(n).width for n in (10 * MIB, GIB, 8 * GIB)] == [256, 2048, 4096]
    with pytest.raises(ValueError):
        syn.shape_for(0)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("syn") / "syn-10m.gguf"
    return path, syn.write(path, 10 * MIB, seed=3)


def test_the_file_is_a_llama_with_the_planned_tensors(small):
    import gguf
    path, shape = small
    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    got = {t.name: tuple(int(x) for x in reversed(t.shape)) for t in reader.tensors}
    assert got == syn.tensor_shapes(shape)
    assert path.stat().st_size <= 10 * MIB
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == shape.vocab


def test_llama_cpp_loads_and_decodes_it_and_hypnos_reads_its_shape(small):
    import llama_cpp

    from hypnos.engines.gguf_meta import read_gguf_meta
    path, shape = small
    llm = llama_cpp.Llama(str(path), n_ctx=256, n_gpu_layers=0, verbose=False)
    try:
        assert llm.n_vocab() == shape.vocab
        out = llm.create_chat_completion([{"role": "user", "content": "hello there"}],
                                         max_tokens=6, temperature=0)
        assert out["usage"]["prompt_tokens"] > 3
        assert out["usage"]["completion_tokens"] > 0
    finally:
        llm.close()
    meta = read_gguf_meta(path).to_shape()
    assert meta.num_layers == shape.layers
    assert abs(meta.weights_bytes - shape.file_bytes()) < 0.01 * shape.file_bytes()
