"""Transcription on faster-whisper (engine kind ``faster_whisper``, CTranslate2).

``load()`` imports faster-whisper (without it: ``EngineUnavailable("faster_whisper", "stt")``)
and builds a ``WhisperModel`` from a local CTranslate2 folder. A path that is not a folder is
refused here: faster-whisper would read it as a Hugging Face hub id and try to download it.

``transcribe()`` blocks and runs in the caller's (worker) thread. Up to ``spec.slots`` calls
may run at once (CTranslate2 workers); more wait inside CTranslate2. Audio is decoded with
PyAV (bundled FFmpeg: wav, flac, ogg/opus, mp3, m4a...) and resampled to 16 kHz mono.

A request that does not ask for timestamps (``TranscribeRequest.timestamps``) has a clip of
up to 9 s read in a 10 s window (``window_frames``), not the 30 s faster-whisper pads every
window to. On a CPU the encoder's pass over that padding is about half of a short request's
transcription (whisper tiny.en, 2 cores: 472 ms of about 1 s for a 2 s question, against 99
ms over 10 s). The words come out the same (``bench/whisper_window.py``, figures in
bench/README.md), but not the timestamps: whisper places the segments as if in a longer
window (a 2.4 s clip ends at 7.0 s). A shorter window than 10 s is worse (the speech and 1 s
alone: 11 of 20 spoken requests wrong, often repeated over and over), and so is a window just
over a longer clip (a sentence said four times in 9.6 s came back seven times).
"""
from __future__ import annotations

import gc
import io
import logging
import math
import os
import threading
import time
from contextlib import contextmanager

from hypnos.engines.errors import AudioDecodeError, EngineError, EngineUnavailable
from hypnos.engines.records import (
    LoadReport, LoadSpec, Segment, TranscribeRequest, TranscribeResult,
)

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
DEFAULT_BEAM_SIZE = 5
#: Whisper's window, in feature frames of 10 ms: the 30 s faster-whisper pads every window to.
FULL_WINDOW = 3000
#: The short window (10 s), and the silence it keeps after the speech at least (1 s).
SHORT_WINDOW, TAIL = 1000, 100
_window = threading.local()          # .short: this thread's transcription may trim


def window_frames(content: int) -> int:
    """How many of a window's frames the encoder reads when ``content`` of them hold audio
    (the rest is faster-whisper's padding): the short window when the audio and 1 s fit in
    it, else the whole window. Pure."""
    return SHORT_WINDOW if content + TAIL <= SHORT_WINDOW else FULL_WINDOW


def trimmed(features):
    """``features`` (mel frames on the last axis, padded with zero frames up to the full
    window) cut to ``window_frames`` of their content. The padding is frames of exact zeros;
    a frame of audio, silence included, is not zero in every one of its mel bands. Pure."""
    import numpy as np
    frames = features.shape[-1]
    if frames != FULL_WINDOW:
        return features
    used = np.flatnonzero(features.reshape(-1, frames).any(axis=0))
    keep = window_frames(int(used[-1]) + 1 if used.size else 0)
    return features if keep >= frames else np.ascontiguousarray(features[..., :keep])


def short_window_model():
    """faster-whisper's ``WhisperModel`` with its encoder reading ``trimmed`` windows."""
    from faster_whisper import WhisperModel

    class ShortWindowModel(WhisperModel):
        """Trims only inside ``short_windows()`` on the calling thread (faster-whisper encodes
        on the thread that reads its segments)."""
        def encode(self, features):
            return super().encode(trimmed(features) if getattr(_window, "short", False)
                                  else features)
    return ShortWindowModel


@contextmanager
def short_windows(on: bool = True):
    """Within it, this thread's transcriptions read short clips in the short window."""
    before = getattr(_window, "short", False)
    _window.short = on
    try:
        yield
    finally:
        _window.short = before


def cuda_available() -> bool:
    try:
        import ctranslate2
        return ctranslate2.get_cuda_device_count() > 0
    except Exception:  # noqa: BLE001 - a broken CUDA runtime means "no CUDA" here
        return False


class WhisperTranscriber:
    """One faster-whisper model. Construction is cheap; ``load`` builds it."""

    def __init__(self):
        self._model = None
        self.device: str | None = None
        self.compute_type: str | None = None
        self.beam_size = DEFAULT_BEAM_SIZE

    # ------------------------------------------------------------------ lifecycle

    def load(self, spec: LoadSpec) -> LoadReport:
        """Build the model from ``spec.weights_path`` (a CTranslate2 folder, or the
        ``model.bin`` inside one). Blocks.

        ``spec.options`` may set ``device``, ``compute_type`` and ``beam_size``; else CUDA
        when CTranslate2 sees a device and ``spec.gpu_layers`` is not 0. ``self.device`` is
        the one the model was built on.
        """
        try:
            WhisperModel = short_window_model()
        except ImportError:
            raise EngineUnavailable("faster_whisper", "stt") from None
        folder = spec.weights_path
        if folder is not None and folder.name == "model.bin" and folder.is_file():
            # A catalog entry assembled file by file names its model.bin: the folder holds it.
            folder = folder.parent
        if folder is None or not folder.is_dir():
            raise EngineError(f"faster-whisper needs a CTranslate2 model folder; "
                              f"{folder} is not a folder (model '{spec.model_id}')")
        for needed in ("model.bin", "tokenizer.json"):
            # Without tokenizer.json faster-whisper would fetch one from the hub.
            if not (folder / needed).is_file():
                raise EngineError(f"{folder} has no {needed} (model '{spec.model_id}')")
        opts = spec.options or {}
        # gpu_layers 0: the scheduler placed it in host memory (this build cannot use the GPU).
        device = opts.get("device") or ("cuda" if spec.gpu_layers != 0 and cuda_available()
                                        else "cpu")
        compute_type = opts.get("compute_type") or ("float16" if device == "cuda" else "int8")
        self.beam_size = int(opts.get("beam_size", DEFAULT_BEAM_SIZE))
        started = time.perf_counter()
        try:
            self._model = WhisperModel(
                str(folder), device=device, compute_type=compute_type,
                cpu_threads=spec.threads or os.cpu_count() or 1,
                num_workers=max(1, spec.slots), local_files_only=True)
        except (RuntimeError, ValueError, OSError) as exc:
            raise EngineError(f"faster-whisper refused {folder}: {exc}") from exc
        self.device, self.compute_type = device, compute_type
        ms = (time.perf_counter() - started) * 1000
        log.info("loaded %s on %s (%s) in %.0f ms", folder, device, compute_type, ms)
        return LoadReport(load_mode="read", weights_ms=ms, total_ms=ms)

    def unload(self) -> None:
        """Free the model. Idempotent."""
        if self._model is not None:
            self._model = None
            gc.collect()

    # ------------------------------------------------------------------ inference

    def transcribe(self, req: TranscribeRequest, cancel: threading.Event) -> TranscribeResult:
        """Transcribe the whole file. Raises AudioDecodeError for undecodable input.

        ``cancel`` is checked between segments (one segment is up to 30 s of audio); when it
        is set the segments decoded so far are returned.
        """
        model = self._model
        if model is None:
            raise EngineError("the faster-whisper model is not loaded")
        started = time.perf_counter()
        audio = decode_audio(req.audio)
        duration = len(audio) / SAMPLE_RATE
        language = req.language
        if language and language not in model.supported_languages:
            # A hint this model cannot follow: English-only models use English, others detect.
            log.info("language %r is not supported by this model; ignoring the hint", language)
            language = None
        segments, info = model.transcribe(
            audio, language=language, initial_prompt=req.prompt or None,
            hotwords=", ".join(req.hotwords) or None, vad_filter=False,
            beam_size=self.beam_size)
        out: list[Segment] = []
        pieces: list[str] = []
        if not cancel.is_set():
            with short_windows(not req.timestamps):       # the segments are decoded here
                for seg in segments:
                    pieces.append(seg.text)
                    if req.timestamps:      # else not the speech's times: not kept
                        start, end = within(seg.start, seg.end, duration)
                        out.append(Segment(start=start, end=end, text=seg.text.strip()))
                    if cancel.is_set():
                        break
        return TranscribeResult(
            text="".join(pieces).strip(), language=info.language, duration_secs=duration,
            segments=out, processing_ms=(time.perf_counter() - started) * 1000)


def within(start: float, end: float, duration: float) -> tuple[float, float]:
    """A segment's (start, end), rounded to the millisecond and held inside the audio's
    ``duration``: whisper's timestamp tokens can name a time past the end of the speech
    (seen with hotwords: 7.0 s for a 2.9 s clip), which a subtitle file or a client seeking
    the audio must not get. Pure."""
    end = min(round(max(end, 0.0), 3), math.floor(duration * 1000) / 1000)
    return round(min(max(start, 0.0), end), 3), end


def decode_audio(data: bytes):
    """``data`` (any container PyAV reads) as float32 mono samples at 16 kHz.

    Raises AudioDecodeError when nothing decodable is in it."""
    if not data:
        raise AudioDecodeError("the audio file is empty")
    from faster_whisper import decode_audio as fw_decode
    try:
        import av
    except ImportError:
        raise EngineUnavailable("faster_whisper", "stt") from None
    try:
        audio = fw_decode(io.BytesIO(data), sampling_rate=SAMPLE_RATE)
    except IndexError:       # PyAV found a container but no audio stream in it
        raise AudioDecodeError("the file holds no audio stream") from None
    except (av.error.FFmpegError, ValueError, EOFError) as exc:
        raise AudioDecodeError(f"the audio could not be decoded: {exc}") from None
    if audio.size == 0:
        raise AudioDecodeError("the file holds no decodable audio")
    return audio.astype("float32", copy=False)
