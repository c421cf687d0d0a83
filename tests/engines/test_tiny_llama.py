"""The tiny random-weight llama GGUF the decode-overhead bench runs on (``tests/tiny_llama.py``,
``bench/llama_server.py --tiny``): two 64-wide layers carrying SmolLM2's real 49,152-token
vocabulary. It must be what the bench says it is (architecture, shapes, the source's
vocabulary), and the pinned llama.cpp must load it and decode through the engine."""
import threading

import pytest

from conftest import require_smollm2
from tiny_llama import FFN, HEADS, HEADS_KV, LAYERS, WIDTH, write_tiny_llama
from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.records import ChatRequest, LoadSpec

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def source():
    return require_smollm2()


@pytest.fixture(scope="module")
def gguf_path(source, tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("llama") / "tiny-llama.gguf", source)


def test_the_file_is_a_two_layer_64_wide_llama_with_the_sources_vocabulary(gguf_path, source):
    import gguf
    meta = read_gguf_meta(gguf_path)
    assert meta.architecture == "llama"
    tiny, real = gguf.GGUFReader(str(gguf_path)), gguf.GGUFReader(str(source))
    field = lambda r, k: r.fields[k].contents()  # noqa: E731
    assert field(tiny, "llama.block_count") == LAYERS == 2
    assert field(tiny, "llama.embedding_length") == WIDTH == 64
    tokens = field(tiny, "tokenizer.ggml.tokens")
    assert len(tokens) == 49152 and tokens == field(real, "tokenizer.ggml.tokens")
    for key in ("tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.pre", "tokenizer.chat_template"):
        assert field(tiny, key) == field(real, key), key
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in tiny.tensors}
    hd = WIDTH // HEADS
    assert shapes["token_embd.weight"] == (WIDTH, 49152)      # gguf ne order
    assert shapes["output.weight"] == (WIDTH, 49152)
    assert shapes["blk.1.attn_k.weight"] == (WIDTH, hd * HEADS_KV)
    assert shapes["blk.1.ffn_down.weight"] == (FFN, WIDTH)
    assert not any(name.startswith(f"blk.{LAYERS}.") for name in shapes)


def test_llama_cpp_loads_it_and_the_engine_decodes_the_tokens_asked_for(gguf_path):
    eng = LlamaChatEngine()
    eng.load(LoadSpec("tiny-llama", gguf_path, context_len=1024, slots=2, threads=1))
    try:
        assert eng._ll.llama_vocab_n_tokens(eng._vocab) == 49152
        ask = lambda: eng.chat(ChatRequest(  # noqa: E731
            messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=24,
            temperature=0), None, threading.Event())
        first = ask()
        assert first.finish_reason in ("length", "stop")
        assert first.completion_tokens <= 24
        assert ask().text == first.text                      # greedy: the same twice
    finally:
        eng.unload()


def test_the_plain_greedy_pick_is_llama_cpps_greedy_samplers(gguf_path):
    """The decode loop reads a plain greedy token as the logits' argmax instead of running
    llama.cpp's greedy chain: both pick the same token from the same logits; a bias, a
    grammar or a penalty keeps the chain."""
    from hypnos.engines.llama.sampling import Sampling, build_sampler
    eng = LlamaChatEngine()
    eng.load(LoadSpec("tiny-llama", gguf_path, context_len=1024, slots=1, threads=1))
    try:
        eng.chat(ChatRequest(messages=[{"role": "user", "content": "Once upon a time"}],
                             max_tokens=8, temperature=0), None, threading.Event())
        ll, loop = eng._ll, eng._loop

        def both():
            chain = build_sampler(ll, eng._vocab, Sampling(temperature=0))
            try:
                return loop._greedy(-1), ll.llama_sampler_sample(chain, eng._ctx, -1)
            finally:
                ll.llama_sampler_free(chain)
        fast, chain = loop.call(both)
        assert fast == chain
        assert Sampling(temperature=0).plain_greedy
        assert not Sampling(temperature=0, logit_bias=((fast, -100.0),)).plain_greedy
        assert not Sampling(temperature=0, grammar='root ::= "a"').plain_greedy
        assert not Sampling(temperature=0, presence_penalty=0.5).plain_greedy
        assert not Sampling().plain_greedy                   # the default samples
    finally:
        eng.unload()
