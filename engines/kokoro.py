"""Speech on Kokoro-82M through onnxruntime (engine kind ``onnx_runtime``, modality
``text_to_speech``).

kokoro-onnx and onnxruntime are imported in ``load()`` only; without them ``load`` raises
``EngineUnavailable("onnx_runtime", "tts")``. kokoro-onnx needs no system espeak (its
``espeakng-loader`` dependency bundles the library and data).

Files: ``spec.weights_path`` is the ``.onnx`` model, ``spec.files["voices_path"]`` the voice
pack (an ``.npz``; the upstream ``voices-v1.0.bin`` is an npz too). Both load with the same
``np.load``.

Voices: OpenAI names map to Kokoro voices (spec section 10), raw Kokoro ids pass through,
anything else becomes ``af_heart``. When the resulting voice is not in the loaded pack the
pack's first voice (sorted by name) is used instead: the default lineup's pack
(``voices_ja.npz``) holds only the Japanese voices jf_alpha, jf_gongitsune, jf_nezumi,
jf_tebukuro and jm_kumo, so every OpenAI name speaks as jf_alpha there; with
``lang="en-us"`` that voice still speaks English.

Language: the request's ISO 639-1 code picks the espeak language Kokoro phonemizes with
(``LANGUAGES``); a region form such as ``en-gb`` or ``pt-BR`` is accepted too. Codes Kokoro
was not trained on fall back to ``en-us``.

Speed: Kokoro accepts 0.5..2.0; the route allows 0.25..4.0 (the OpenAI range) and the engine
clamps to what the model takes.
"""
from __future__ import annotations

import logging
import re
import threading
import time

from hypnos.engines.errors import EngineError, EngineUnavailable
from hypnos.engines.phrase_breaks import first_break
from hypnos.engines.records import LoadReport, LoadSpec, OnAudio, SpeechRequest

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
PAUSE_SECS = 0.180                       # silence between phrases
MAX_PHRASE_CHARS = 200                   # longer sentences are cut at commas, then spaces
MIN_PHRASE_CHARS = 5                     # shorter pieces ("Mr.", "Hi.") join the next one
MIN_SPEED, MAX_SPEED = 0.5, 2.0          # what the Kokoro graph accepts
FALLBACK_VOICE = "af_heart"
OPENAI_VOICES = {
    "alloy": "af_alloy", "echo": "am_echo", "fable": "bm_fable", "onyx": "am_onyx",
    "nova": "af_nova", "shimmer": "af_bella", "coral": "af_bella", "ash": "am_adam",
    "sage": "af_sarah", "ballad": "bm_george", "verse": "am_michael",
}
# Raw Kokoro ids: a language letter, a gender letter, "_", a name (af_heart, jm_kumo).
_RAW_VOICE = re.compile(r"[a-z][fm]_[a-z0-9_]+")
# ISO 639-1 (or a region form) -> the espeak language of Kokoro v1.0's nine languages.
LANGUAGES = {
    "en": "en-us", "en-us": "en-us", "en-gb": "en-gb", "ja": "ja", "zh": "cmn", "cmn": "cmn",
    "es": "es", "fr": "fr-fr", "fr-fr": "fr-fr", "hi": "hi", "it": "it", "pt": "pt-br",
    "pt-br": "pt-br",
}
DEFAULT_LANG = "en-us"

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])\s*|\s*\n\s*")
_WORD = re.compile(r"\w")
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+|(?<=[、，；：])\s*")


# ----------------------------------------------------------------- pure helpers

def kokoro_voice(name: str, available: list[str]) -> str:
    """The Kokoro voice for a requested name, given the voices of the loaded pack (sorted)."""
    key = (name or "").strip().lower()
    voice = OPENAI_VOICES.get(key) or (key if _RAW_VOICE.fullmatch(key) else FALLBACK_VOICE)
    if voice in available or not available:
        return voice
    return available[0]


def kokoro_lang(language: str | None) -> str:
    """The espeak language for an ISO 639-1 code (``en`` -> ``en-us``); unknown -> en-us."""
    key = (language or "en").strip().lower().replace("_", "-")
    return LANGUAGES.get(key) or LANGUAGES.get(key.split("-")[0]) or DEFAULT_LANG


def _cut(piece: str, limit: int) -> list[str]:
    """Cut one piece into parts of at most ``limit`` characters at spaces (hard cuts for
    text without spaces, such as Japanese)."""
    out, line = [], ""
    for word in piece.split(" "):
        while len(word) > limit:
            if line:
                out.append(line)
                line = ""
            out.append(word[:limit])
            word = word[limit:]
        candidate = f"{line} {word}" if line else word
        if len(candidate) > limit:
            out.append(line)
            candidate = word
        line = candidate
    if line:
        out.append(line)
    return out


def _bounded(sentence: str, limit: int) -> list[str]:
    if len(sentence) <= limit:
        return [sentence]
    parts: list[str] = []
    for clause in (c for c in _CLAUSE_END.split(sentence) if c.strip()):
        for part in _cut(clause.strip(), limit):
            if parts and len(parts[-1]) + 1 + len(part) <= limit:
                parts[-1] = f"{parts[-1]} {part}"
            else:
                parts.append(part)
    return parts


def _quick_start(phrase: str) -> list[str]:
    """The first phrase cut at its first phrase break (`engines.phrase_breaks`): the first
    audio waits for fewer words."""
    cut = first_break(phrase)
    if cut is None or len(phrase) - cut[1] < MIN_PHRASE_CHARS:
        return [phrase]
    return [phrase[:cut[0]], phrase[cut[1]:]]


def split_phrases(text: str, limit: int = MAX_PHRASE_CHARS) -> list[str]:
    """Split text into phrases: at sentence punctuation and line breaks first, then a
    sentence longer than ``limit`` at commas (and the like), then at spaces. Pieces shorter
    than ``MIN_PHRASE_CHARS`` join the following one. The first phrase also ends at its
    first phrase break (``_quick_start``), so a stream's first audio comes sooner.
    Pure; never returns empty phrases."""
    phrases: list[str] = []
    carry = ""
    for sentence in _SENTENCE_END.split(text.strip()):
        sentence = " ".join(sentence.split())
        if not _WORD.search(sentence):      # nothing to speak ("...", "--")
            continue
        sentence = f"{carry} {sentence}" if carry else sentence
        if len(sentence) < MIN_PHRASE_CHARS:
            carry = sentence
            continue
        carry = ""
        phrases.extend(_bounded(sentence, limit))
    if carry:
        if phrases and len(phrases[-1]) + 1 + len(carry) <= limit:
            phrases[-1] = f"{phrases[-1]} {carry}"
        else:
            phrases.append(carry)
    return _quick_start(phrases[0]) + phrases[1:] if phrases else phrases


def pcm16(audio) -> bytes:
    """float32 samples in [-1, 1] -> 16-bit little-endian PCM bytes."""
    import numpy as np
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


# ----------------------------------------------------------------------- engine

class KokoroSpeaker:
    """The ``Speaker`` (engines.protocols) for Kokoro ONNX models. Construction imports nothing.

    ``synthesize`` may run from several threads at once (onnxruntime sessions are
    thread-safe; kokoro-onnx serializes espeak itself)."""

    sample_rate = SAMPLE_RATE

    def __init__(self):
        self._kokoro = None
        self._styles: dict = {}
        self.voices: list[str] = []
        self.provider: str | None = None      # the execution provider really in use
        self.device = "cpu"                   # "cuda" when that provider is CUDA's

    def load(self, spec: LoadSpec) -> LoadReport:
        """Build the onnxruntime session (CUDA first, then CPU) and read the voice pack.
        Blocks. Raises EngineUnavailable without kokoro-onnx, EngineError on bad files."""
        try:
            import numpy as np
            import onnxruntime as ort
            from kokoro_onnx import Kokoro
        except ImportError:
            raise EngineUnavailable("onnx_runtime", "tts") from None
        voices_path = spec.files.get("voices_path")
        if spec.weights_path is None or voices_path is None:
            raise EngineError(f"{spec.model_id}: Kokoro needs weights_path (the .onnx) "
                              "and voices_path (the voice pack)")
        started = time.monotonic()
        try:
            session = ort.InferenceSession(str(spec.weights_path), _options(ort, spec),
                                           providers=_providers(ort, spec.gpu_layers != 0))
            weights_ms = (time.monotonic() - started) * 1000
            kokoro = Kokoro.from_session(session, str(voices_path))
            with np.load(str(voices_path)) as pack:
                styles = {name: pack[name] for name in pack.files}
        except Exception as exc:  # noqa: BLE001 - onnxruntime and numpy raise many kinds
            raise EngineError(f"{spec.model_id}: Kokoro could not load: {exc}") from exc
        if not styles:
            raise EngineError(f"{spec.model_id}: the voice pack {voices_path} holds no voices")
        # phonemizer warns "words count mismatch" on every phrase with punctuation kept.
        logging.getLogger("phonemizer").setLevel(logging.ERROR)
        self._kokoro, self._styles = kokoro, styles
        self.voices = sorted(styles)
        self.provider = session.get_providers()[0]
        self.device = "cuda" if self.provider == "CUDAExecutionProvider" else "cpu"
        total_ms = (time.monotonic() - started) * 1000
        log.info("%s: Kokoro loaded on %s with %d voices in %.0f ms", spec.model_id,
                 self.provider, len(self.voices), total_ms)
        return LoadReport(load_mode="read", weights_ms=weights_ms,
                          context_ms=total_ms - weights_ms, total_ms=total_ms)

    def unload(self) -> None:
        self._kokoro, self._styles, self.voices = None, {}, []

    def synthesize(self, req: SpeechRequest, on_audio: OnAudio,
                   cancel: threading.Event) -> float:
        """Speak ``req.text`` phrase by phrase: each phrase's PCM (after the first, preceded
        by PAUSE_SECS of silence) goes to ``on_audio`` as soon as it is made, from this
        thread. ``cancel`` is checked before each phrase; a cancelled call returns the
        seconds made so far. Raises EngineError when synthesis fails."""
        kokoro = self._kokoro
        if kokoro is None:
            raise EngineError("the Kokoro engine is not loaded")
        style = self._styles[kokoro_voice(req.voice, self.voices)]
        lang = kokoro_lang(req.language)
        speed = min(MAX_SPEED, max(MIN_SPEED, float(req.speed)))
        silence = bytes(2 * round(PAUSE_SECS * SAMPLE_RATE))
        samples = 0
        for i, phrase in enumerate(split_phrases(req.text)):
            if cancel.is_set():
                break
            try:
                audio, _rate = kokoro.create(phrase, style, speed=speed, lang=lang)
            except Exception as exc:  # noqa: BLE001 - espeak, onnxruntime, ValueError
                raise EngineError(f"Kokoro failed on phrase {i + 1}: {exc}") from exc
            chunk = (silence if i else b"") + pcm16(audio)
            samples += len(chunk) // 2
            on_audio(chunk)
        return samples / SAMPLE_RATE


def _providers(ort, gpu: bool = True) -> list[str]:
    """CUDA first when this onnxruntime build has it (onnxruntime-gpu) and ``gpu`` (not a
    host placement), then CPU. Listing a provider the build lacks only warns, so ask for the
    available ones."""
    available = ort.get_available_providers()
    wanted = ("CUDAExecutionProvider", "CPUExecutionProvider") if gpu else \
        ("CPUExecutionProvider",)
    return [p for p in wanted if p in available]


def _options(ort, spec: LoadSpec):
    opts = ort.SessionOptions()
    if spec.threads:
        opts.intra_op_num_threads = spec.threads
    opts.log_severity_level = 3
    return opts
