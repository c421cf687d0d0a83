"""(engine kind, modality) -> engine class. Modules are imported only when a model of that
kind loads, so a missing optional library is a 503 naming its extra, not an ImportError at
start-up."""
from __future__ import annotations

import importlib
import importlib.util

from hypnos.engines.base import EngineUnavailable

# (kind, primary modality) -> (module, class, pip extra); modality None matches any.
ENGINES = {
    ("ggml_llama", None): ("hypnos.engines.llama", "LlamaChatEngine", "llama"),
    ("ggml_llama", "embeddings"): ("hypnos.engines.llama_embed", "LlamaEmbedder", "llama"),
    ("onnx_runtime", "embeddings"): ("hypnos.engines.onnx_embed", "OnnxEmbedder", "embeddings"),
    ("onnx_runtime", "text_to_speech"): ("hypnos.engines.kokoro", "KokoroSpeaker", "tts"),
    ("faster_whisper", None): ("hypnos.engines.whisper", "WhisperTranscriber", "stt"),
    ("docling", None): ("hypnos.engines.docling_convert", "DoclingConverter", "docs"),
    ("gliner", None): ("hypnos.engines.gliner_ner", "GlinerExtractor", "ner"),
    ("ggml_diffusion", None): ("hypnos.engines.sd_diffusion", "DiffusionGenerator", "images"),
}
PLANNED = {
    "ggml_whisper": "stt",
}


class EngineNotBuilt(EngineUnavailable):
    """The engine kind is valid but this version of Hypnos has no implementation of it."""

    def __init__(self, kind: str, modality: str | None = None):
        self.engine = kind
        self.extra = PLANNED.get(kind, "")
        what = f"engine {kind}" + (f" for {modality}" if modality else "")
        Exception.__init__(self, f"{what} is not implemented in this version of Hypnos")


def _entry(kind: str, modality: str | None):
    return ENGINES.get((kind, modality)) or ENGINES.get((kind, None))


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def create_engine(kind: str, modality: str | None = None):
    """A new, unloaded engine for a model of ``kind`` whose primary modality is ``modality``."""
    entry = _entry(kind, modality)
    if entry is None or not _module_exists(entry[0]):
        raise EngineNotBuilt(kind, modality)
    module, cls, _extra = entry
    return getattr(importlib.import_module(module), cls)()


def is_available(kind: str, modality: str | None = None) -> bool:
    entry = _entry(kind, modality)
    return entry is not None and _module_exists(entry[0])


# What each engine class implements, by name, so the service can refuse a request before it
# loads anything (and without importing the engine's library).
CHAT, COMPLETE, EMBED, TRANSCRIBE, SPEAK = "chat", "complete", "embed", "transcribe", "speak"
CONVERT, EXTRACT, IMAGES, PARK, SESSIONS = ("convert", "extract", "generate_images", "park",
                                            "sessions")
CAPABILITIES = {
    "LlamaChatEngine": frozenset({CHAT, COMPLETE, PARK, SESSIONS}),
    "LlamaEmbedder": frozenset({EMBED}),
    "OnnxEmbedder": frozenset({EMBED}),
    "KokoroSpeaker": frozenset({SPEAK}),
    "WhisperTranscriber": frozenset({TRANSCRIBE}),
    "DoclingConverter": frozenset({CONVERT}),
    "GlinerExtractor": frozenset({EXTRACT}),
    "DiffusionGenerator": frozenset({IMAGES}),
}


def capabilities(kind: str, modality: str | None = None) -> frozenset[str]:
    entry = _entry(kind, modality)
    return CAPABILITIES.get(entry[1], frozenset()) if entry else frozenset()
