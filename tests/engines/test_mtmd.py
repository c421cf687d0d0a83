"""engines/llama/mtmd.py on the real SmolLM2-135M and a tiny generated vision projector.

The projector (tests/tiny_mmproj.py) has RANDOM weights: these tests prove the plumbing only
(the mmproj GGUF is read by the bundled llama.cpp, an image is decoded, encoded, projected to
the text model's width and decoded into a KV sequence, and generation can continue), never
that the model sees anything in the image.
"""
from __future__ import annotations

import io
import os

import pytest
from llama_cpp import llama_cpp as ll
from PIL import Image

from conftest import require_smollm2
from tiny_mmproj import TinyVision, write_tiny_mmproj

from hypnos.engines.llama.cpu import extra_buffers_ok
from hypnos.engines.errors import EngineError
from hypnos.engines.llama.mtmd import MediaDecodeError, Projector

N_CTX = 512
N_BATCH = 128
SLOTS = 2
THREADS = min(2, len(os.sched_getaffinity(0)))
SPEC = TinyVision()


def _png(width: int, height: int, fmt: str = "PNG") -> bytes:
    img = Image.new("RGB", (width, height))
    img.putdata([((x * 7) % 256, (y * 13) % 256, (x * y) % 256)
                 for y in range(height) for x in range(width)])
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def model():
    ll.llama_backend_init()
    params = ll.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = extra_buffers_ok()      # the engine's rule (AMX hosts)
    ptr = ll.llama_model_load_from_file(str(require_smollm2()).encode(), params)
    assert ptr, "llama.cpp refused SmolLM2"
    yield ptr
    ll.llama_model_free(ptr)


@pytest.fixture(scope="module")
def lctx(model):
    params = ll.llama_context_default_params()
    params.n_ctx = N_CTX
    params.n_batch = params.n_ubatch = N_BATCH
    params.n_seq_max = SLOTS
    params.kv_unified = False
    params.n_threads = params.n_threads_batch = THREADS
    ctx = ll.llama_init_from_model(model, params)
    assert ctx
    yield ctx
    ll.llama_free(ctx)


@pytest.fixture(scope="module")
def projector(model, tmp_path_factory):
    path = write_tiny_mmproj(tmp_path_factory.mktemp("mmproj") / "tiny-mmproj.gguf", SPEC)
    proj = Projector(model, path, threads=THREADS)
    yield proj
    proj.close()


def _text_tokens(model, text: str) -> int:
    vocab = ll.llama_model_get_vocab(model)
    raw = text.encode()
    buf = (ll.llama_token * (len(raw) + 8))()
    n = ll.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, True)
    assert n >= 0
    return n


def _greedy(lctx, model) -> int:
    n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))
    logits = ll.llama_get_logits_ith(lctx, -1)
    assert logits
    row = [logits[i] for i in range(n_vocab)]
    return max(range(n_vocab), key=row.__getitem__)


def test_projector_reports_vision_and_a_marker(projector):
    assert projector.vision and not projector.audio
    assert projector.marker                        # "<__media__>" in this build


def test_image_prompt_is_evaluated_and_generation_continues(projector, lctx, model):
    seq = 1                                        # not 0: the sequence id is honoured
    mem = ll.llama_get_memory(lctx)
    ll.llama_memory_seq_rm(mem, seq, -1, -1)
    prompt = (f"<|im_start|>user\nWhat is in this picture? {projector.marker}<|im_end|>\n"
              "<|im_start|>assistant\n")
    text_only = _text_tokens(model, prompt.replace(projector.marker, ""))
    with projector.tokenize(prompt, [_png(48, 40)]) as chunks:
        assert chunks.n_tokens == text_only + SPEC.n_patches > text_only
        n_past = projector.evaluate(lctx, chunks, seq_id=seq, n_past=0, n_batch=N_BATCH)
        assert n_past == chunks.n_pos
    assert ll.llama_memory_seq_pos_max(mem, seq) == n_past - 1
    assert ll.llama_memory_seq_pos_max(mem, 0) == -1      # the other slot is untouched

    token = _greedy(lctx, model)
    # One more token in our sequence (llama_batch_get_one would put it in sequence 0).
    one = ll.llama_batch_init(1, 0, 1)
    try:
        one.n_tokens = 1
        one.token[0], one.pos[0], one.n_seq_id[0] = token, n_past, 1
        one.seq_id[0][0], one.logits[0] = seq, True
        assert ll.llama_decode(lctx, one) == 0
    finally:
        ll.llama_batch_free(one)
    assert ll.llama_memory_seq_pos_max(mem, seq) == n_past
    assert _greedy(lctx, model) >= 0


def test_two_images_in_order(projector, model):
    prompt = f"A {projector.marker} then B {projector.marker} end"
    with projector.tokenize(prompt, [_png(32, 32), _png(64, 16)]) as chunks:
        text_only = _text_tokens(model, prompt.replace(projector.marker, ""))
        assert chunks.n_tokens == text_only + 2 * SPEC.n_patches


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP", "GIF", "BMP"])
def test_other_image_formats(projector, model, fmt):
    """WebP is why images go through Pillow: libmtmd's stb_image has no WebP decoder."""
    prompt = f"see {projector.marker} ok"
    with projector.tokenize(prompt, [_png(40, 40, fmt)]) as chunks:
        assert chunks.n_tokens == _text_tokens(model, "see  ok") + SPEC.n_patches


def test_undecodable_image_is_a_media_error(projector):
    with pytest.raises(MediaDecodeError) as err:
        projector.tokenize(f"look {projector.marker} here",
                           [b"\x89PNG\r\n\x1a\n but not really a png"])
    assert err.value.index == 0


def test_audio_to_a_vision_only_projector_is_a_media_error(projector):
    wav = b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + bytes(28)
    with pytest.raises(MediaDecodeError, match="no audio encoder"):
        projector.tokenize(f"{projector.marker} x", [wav])


def test_marker_count_mismatch_is_a_media_error(projector):
    with pytest.raises(MediaDecodeError, match="2 media markers for 1"):
        projector.tokenize(f"{projector.marker}{projector.marker} x", [_png(32, 32)])


def test_huge_canvas_is_refused_before_decoding(projector, monkeypatch):
    import hypnos.engines.llama.mtmd as mtmd
    monkeypatch.setattr(mtmd, "MAX_IMAGE_PIXELS", 32 * 32 - 1)
    with pytest.raises(MediaDecodeError, match="larger than"):
        projector.tokenize(f"{projector.marker} x", [_png(32, 32)])


def test_evaluate_refuses_a_prompt_ending_in_media(projector, lctx):
    with projector.tokenize(f"x {projector.marker}", [_png(32, 32)]) as chunks:
        assert not chunks.ends_with_text
        with pytest.raises(EngineError, match="must end with text"):
            projector.evaluate(lctx, chunks, seq_id=0, n_past=0, n_batch=N_BATCH)


def test_chunks_free_and_projector_close_are_idempotent(model, tmp_path):
    proj = Projector(model, write_tiny_mmproj(tmp_path / "p.gguf", SPEC), threads=THREADS)
    chunks = proj.tokenize(f"{proj.marker} x", [_png(32, 32)])
    chunks.free()
    chunks.free()
    with pytest.raises(EngineError, match="freed"):
        _ = chunks.ptr
    proj.close()
    proj.close()
    with pytest.raises(EngineError, match="closed"):
        proj.tokenize("no media", [])


def test_a_file_that_is_not_a_projector_is_refused(model, tmp_path):
    bad = tmp_path / "bad-mmproj.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(256))
    with pytest.raises(EngineError, match="bad-mmproj.gguf"):
        Projector(model, bad, threads=THREADS)


def test_a_projector_of_the_wrong_width_is_refused(model, tmp_path):
    path = write_tiny_mmproj(tmp_path / "wide-mmproj.gguf", TinyVision(n_embd_text=640))
    with pytest.raises(EngineError, match="wide-mmproj.gguf"):
        Projector(model, path, threads=THREADS)


def test_a_missing_projector_file_is_named(model, tmp_path):
    with pytest.raises(EngineError, match="missing.gguf"):
        Projector(model, tmp_path / "missing.gguf", threads=THREADS)
