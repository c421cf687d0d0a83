"""Images and audio into a llama.cpp context through its multimodal library (libmtmd).

A ``Projector`` wraps one ``mtmd_context``: the vision and/or audio encoder of an ``mmproj``
GGUF, bound to the text model it projects into. ``tokenize`` turns a rendered prompt that
holds one ``marker`` per media item, plus the items' encoded bytes, into ``Chunks`` (text
token runs and media embeddings); ``evaluate`` encodes the media and decodes every chunk
into one KV sequence of a llama context.

Threading: ``tokenize`` may be called from any thread, ``evaluate`` from the decode thread;
one lock serialises every use of the mtmd context (it keeps the last encoder output in
itself). Images are decoded with Pillow (PNG, JPEG, WebP, GIF, BMP, TIFF...; stb_image inside
libmtmd has no WebP) after a header-only size check; audio (WAV, MP3, FLAC) is decoded by
libmtmd's own helper, and only when the projector has an audio encoder.

llama-cpp-python (and Pillow) are imported in ``Projector.__init__`` only.
"""
from __future__ import annotations

import ctypes
import io
import logging
import threading
from pathlib import Path

from hypnos.engines.errors import EngineError, EngineUnavailable, MediaDecodeError
from hypnos.engines.llama.log import route_once

log = logging.getLogger(__name__)

#: Largest image accepted, in pixels, read from the header before anything is decoded: a
#: small compressed file can claim a huge canvas. Projectors resize to well under this.
MAX_IMAGE_PIXELS = 32 * 1024 * 1024

#: ``MediaDecodeError`` (``errors``) is raised here for media the projector cannot use.
__all__ = ["Chunks", "MAX_IMAGE_PIXELS", "MediaDecodeError", "Projector"]


def _is_audio(data: bytes) -> bool:
    """The containers libmtmd's helper decodes as audio (WAV, MP3, FLAC), by magic bytes."""
    if len(data) < 12:
        return False
    return ((data[:4] == b"RIFF" and data[8:12] == b"WAVE") or data[:3] == b"ID3"
            or (data[0] == 0xFF and data[1] & 0xE0 == 0xE0) or data[:4] == b"fLaC")


class Chunks:
    """A tokenized multimodal prompt (``mtmd_input_chunks``). Free it once evaluated;
    ``free`` is idempotent and the object is a context manager."""

    _ptr = None

    def __init__(self, mt, ptr):
        self.n_tokens: int = int(mt.mtmd_helper_get_n_tokens(ptr))   # KV cells it fills
        self.n_pos: int = int(mt.mtmd_helper_get_n_pos(ptr))         # positions it advances
        size = mt.mtmd_input_chunks_size(ptr)
        last = mt.mtmd_input_chunks_get(ptr, size - 1) if size else None
        self.ends_with_text = bool(last) and (mt.mtmd_input_chunk_get_type(last)
                                              == mt.MTMD_INPUT_CHUNK_TYPE_TEXT)
        # Owned from here on (until then the caller frees ptr if this raises).
        self._mt, self._ptr = mt, ptr

    @property
    def ptr(self):
        if self._ptr is None:
            raise EngineError("chunks already freed")
        return self._ptr

    def free(self) -> None:
        if self._ptr is not None:
            self._mt.mtmd_input_chunks_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> Chunks:
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __del__(self) -> None:
        self.free()


class Projector:
    """One mmproj file loaded against a loaded text model (``llama_model *``).

    ``model_ptr`` must outlive the projector: close the projector before freeing the model.
    Loading blocks (it reads the file and runs a warm-up encode).
    """

    def __init__(self, model_ptr, mmproj_path: Path, threads: int, use_gpu: bool = False):
        try:
            from llama_cpp import llama_cpp as ll
            from llama_cpp import mtmd_cpp as mt
            import PIL.Image  # noqa: F401  (fail here, not on the first image)
        except ImportError as exc:
            raise EngineUnavailable("ggml_llama", "llama") from exc
        self._mt, self._ll = mt, ll
        self._lock = threading.Lock()
        self._ctx = None
        path = Path(mmproj_path)
        if not path.is_file():
            raise EngineError(f"projector file not found: {path}")
        # mtmd_helper_log_set also sets mtmd_log_set
        route_once(ll, "hypnos.engines.mtmd", mt.mtmd_helper_log_set)
        params = mt.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = max(1, threads)
        params.print_timings = False
        ctx = mt.mtmd_init_from_file(str(path).encode(), model_ptr, params)
        if not ctx:
            raise EngineError(f"llama.cpp refused the projector {path.name} (not an mmproj "
                              "GGUF this build reads, or its width differs from the model's)")
        self._ctx = ctx
        self.vision: bool = bool(mt.mtmd_support_vision(ctx))
        self.audio: bool = bool(mt.mtmd_support_audio(ctx))
        marker = mt.mtmd_get_marker(ctx) or mt.mtmd_default_marker()
        self.marker: str = marker.decode("utf-8")

    # ----------------------------------------------------------------- tokenize

    def tokenize(self, text: str, media: list[bytes], *, add_special: bool = False) -> Chunks:
        """Split ``text`` at its markers and put each media item's embeddings in place of its
        marker. ``text`` must hold exactly ``len(media)`` markers, in order. Special tokens in
        ``text`` are parsed (it is a rendered chat template); ``add_special`` adds the model's
        BOS as ``llama_tokenize`` would, for a template that does not write it. Blocks for
        the media decode (images are decoded before the lock is taken, so a large one does
        not hold up ``evaluate``); raises MediaDecodeError for bad media or a count
        mismatch."""
        count = text.count(self.marker)
        if count != len(media):
            raise MediaDecodeError(f"the prompt holds {count} media markers for "
                                   f"{len(media)} media items")
        decoded = [self._decode(data, i) for i, data in enumerate(media)]
        mt = self._mt
        with self._lock:
            ctx = self._live_ctx()
            bitmaps = []
            chunks = None
            try:
                for i, item in enumerate(decoded):
                    bitmaps.append(self._bitmap(ctx, item, i))
                raw = text.encode("utf-8")
                inp = mt.mtmd_input_text()
                inp.text, inp.text_len = raw, len(raw)
                inp.add_special, inp.parse_special = add_special, True
                chunks = mt.mtmd_input_chunks_init()
                if not chunks:
                    raise EngineError("mtmd could not allocate input chunks")
                array = (mt.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
                rc = mt.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), array, len(bitmaps))
                if rc == 1:
                    raise MediaDecodeError("media markers and media items do not match")
                if rc != 0:
                    raise MediaDecodeError(f"the projector could not preprocess the media "
                                           f"(mtmd_tokenize returned {rc})")
                result, chunks = Chunks(mt, chunks), None
                return result
            finally:
                if chunks:
                    mt.mtmd_input_chunks_free(chunks)
                for bitmap in bitmaps:
                    mt.mtmd_bitmap_free(bitmap)

    def _decode(self, data: bytes, index: int) -> bytes | tuple[int, int, bytes]:
        """Audio stays encoded (libmtmd decodes and resamples it); an image becomes
        (width, height, RGB). Refuses a modality the projector lacks."""
        if _is_audio(data):
            if not self.audio:
                raise MediaDecodeError(f"media item {index} is audio and this model's "
                                       "projector has no audio encoder", index)
            return data
        if not self.vision:
            raise MediaDecodeError(f"media item {index} is not audio (WAV, MP3, FLAC) and "
                                   "this model's projector has no vision encoder", index)
        return _decode_image(data, index)

    def _bitmap(self, ctx, item: bytes | tuple[int, int, bytes], index: int):
        """One decoded media item as an ``mtmd_bitmap`` (the caller frees it). Under the
        lock: the audio helper reads the context."""
        mt = self._mt
        if isinstance(item, bytes):
            buf = (ctypes.c_uint8 * len(item)).from_buffer_copy(item)
            wrapper = mt.mtmd_helper_bitmap_init_from_buf_wrapper(
                ctx, buf, len(item), False, mt.mtmd_helper_init_opt_default())
            if wrapper.video_ctx:
                mt.mtmd_helper_video_free(wrapper.video_ctx)
            if not wrapper.bitmap:
                raise MediaDecodeError(f"media item {index}: the audio could not be decoded",
                                       index)
            return wrapper.bitmap
        width, height, rgb = item
        bitmap = mt.mtmd_bitmap_init(width, height,
                                     (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb))
        if not bitmap:
            raise MediaDecodeError(f"media item {index}: mtmd refused a {width}x{height} "
                                   "image", index)
        return bitmap

    # ----------------------------------------------------------------- evaluate

    def evaluate(self, lctx, chunks: Chunks, seq_id: int, n_past: int, n_batch: int) -> int:
        """Encode the media and decode every chunk into sequence ``seq_id`` of ``lctx``
        from position ``n_past``, with logits for the last token only (read them at
        index -1). Returns the new n_past (``n_past + chunks.n_pos``). Blocks; call it
        on the thread that owns ``lctx``. Raises EngineError when a decode fails (the
        sequence then holds a partial prompt: clear it)."""
        if not chunks.ends_with_text:
            # libmtmd computes no logits after a media chunk; a chat prompt always ends
            # with the assistant header, so this is a caller bug, not a client error.
            raise EngineError("a multimodal prompt must end with text, not a media item")
        ll, mt = self._ll, self._mt
        new_n_past = ll.llama_pos(n_past)
        with self._lock:
            rc = mt.mtmd_helper_eval_chunks(self._live_ctx(), lctx, chunks.ptr, n_past,
                                            seq_id, n_batch, True, ctypes.byref(new_n_past))
        if rc != 0:
            raise EngineError(f"decoding the multimodal prompt failed (code {rc})")
        return int(new_n_past.value)

    # ----------------------------------------------------------------- lifecycle

    def _live_ctx(self):
        if self._ctx is None:
            raise EngineError("projector closed")
        return self._ctx

    def close(self) -> None:
        """Free the mtmd context. Idempotent; waits for a tokenize/evaluate in progress."""
        with self._lock:
            if self._ctx is not None:
                self._mt.mtmd_free(self._ctx)
                self._ctx = None


def _decode_image(data: bytes, index: int) -> tuple[int, int, bytes]:
    """Encoded image bytes -> (width, height, packed RGB). The header is read first so a
    huge canvas is refused before it is decoded."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            if width * height > MAX_IMAGE_PIXELS:
                raise MediaDecodeError(f"media item {index}: a {width}x{height} image is "
                                       f"larger than {MAX_IMAGE_PIXELS} pixels", index)
            rgb = img.convert("RGB").tobytes()
    except MediaDecodeError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError,
            Image.DecompressionBombError) as exc:
        raise MediaDecodeError(f"media item {index} is neither an image nor audio this "
                               f"server decodes ({exc.__class__.__name__})", index) from exc
    return width, height, rgb
