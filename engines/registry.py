"""(engine kind, modality) -> engine class, and what it can do. Modules are imported only when
a model of that kind loads (or, for an engine with ``Entry.prepare``, at start-up staging), so
a missing optional library is a 503 naming its extra, not an ImportError at start-up;
``capabilities`` answers from this table without importing anything.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import NamedTuple

from hypnos.engines.errors import EngineNotBuilt

# ------------------------------------------------------------------- capabilities
# What an engine can be asked, known before it loads. Each names the methods it promises
# (``METHODS``), on the Protocols of ``protocols``.

CHAT = "chat"                    # /v1/chat/completions: ChatEngine.chat over messages
COMPLETE = "complete"            # /v1/completions: ChatEngine.chat with a raw prompt
VISION = "vision"                # chat with image / audio parts (with the model's projector,
                                 # ``aux_path``): picture descriptions
EMBED = "embed"                  # /v1/embeddings: Embedder.embed
RERANK = "rerank"                # /v1/rerank: Reranker.rerank
TRANSCRIBE = "transcribe"        # /v1/audio/transcriptions: Transcriber.transcribe
SPEAK = "speak"                  # /v1/audio/speech: Speaker.synthesize
CONVERT = "convert"              # /v1/documents: Converter.open, convert_pages
EXTRACT = "extract"              # /v1/entities: Extractor.extract
IMAGES = "generate_images"       # /v1/images: ImageGenerator.generate
PARK = "park"                    # KV state parked across a swap: KVChatEngine.park, restore
SESSIONS = "sessions"            # /v1/sessions: KVChatEngine.export_session, import_session...

CAPABILITIES = frozenset({CHAT, COMPLETE, VISION, EMBED, RERANK, TRANSCRIBE, SPEAK, CONVERT,
                          EXTRACT, IMAGES, PARK, SESSIONS})

#: capability -> the methods an engine that has it must have.
METHODS: dict[str, tuple[str, ...]] = {
    CHAT: ("chat", "count_tokens", "prompt_tokens"),
    COMPLETE: ("chat", "count_tokens", "prompt_tokens"),
    VISION: ("chat", "prompt_tokens"),
    EMBED: ("embed",),
    RERANK: ("rerank",),
    TRANSCRIBE: ("transcribe",),
    SPEAK: ("synthesize",),
    CONVERT: ("open", "convert_pages"),
    EXTRACT: ("extract",),
    IMAGES: ("generate",),
    PARK: ("park", "restore"),
    SESSIONS: ("export_session", "import_session", "release_session", "sessions"),
}


class Entry(NamedTuple):
    module: str
    cls: str
    extra: str                   # the pip extra that installs its library
    capabilities: frozenset[str]
    # A function of ``module`` that does, once per process, what a first load does besides
    # building the engine (imports, one-time set-up), for engines where that holds the GIL
    # long enough to stall the event loop when it falls on a request; see ``prepare``.
    prepare: str | None = None


# (kind, primary modality) -> Entry; modality None matches any.
ENGINES: dict[tuple[str, str | None], Entry] = {
    ("ggml_llama", None): Entry("hypnos.engines.llama.engine", "LlamaChatEngine", "llama",
                                frozenset({CHAT, COMPLETE, VISION, PARK, SESSIONS, RERANK})),
    ("ggml_llama", "embeddings"): Entry("hypnos.engines.llama.embed", "LlamaEmbedder", "llama",
                                        frozenset({EMBED})),
    ("ggml_llama", "rerank"): Entry("hypnos.engines.llama.rerank", "LlamaReranker", "llama",
                                    frozenset({RERANK})),
    ("onnx_runtime", "embeddings"): Entry("hypnos.engines.onnx_embed", "OnnxEmbedder",
                                          "embeddings", frozenset({EMBED})),
    ("onnx_runtime", "text_to_speech"): Entry("hypnos.engines.kokoro", "KokoroSpeaker", "tts",
                                              frozenset({SPEAK})),
    ("faster_whisper", None): Entry("hypnos.engines.whisper", "WhisperTranscriber", "stt",
                                    frozenset({TRANSCRIBE})),
    ("docling", None): Entry("hypnos.engines.docling_convert", "DoclingConverter", "docs",
                             frozenset({CONVERT}), prepare="prepare"),
    ("gliner", None): Entry("hypnos.engines.gliner_ner", "GlinerExtractor", "ner",
                            frozenset({EXTRACT})),
    ("ggml_diffusion", None): Entry("hypnos.engines.sd_diffusion", "DiffusionGenerator",
                                    "images", frozenset({IMAGES})),
}
PLANNED = {
    "ggml_whisper": "stt",
}

__all__ = ["CAPABILITIES", "ENGINES", "METHODS", "PLANNED", "EngineNotBuilt", "Entry",
           "capabilities", "create_engine", "is_available", "prepare"]


def _entry(kind: str, modality: str | None) -> Entry | None:
    return ENGINES.get((kind, modality)) or ENGINES.get((kind, None))


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def capabilities(kind: str, modality: str | None = None) -> frozenset[str]:
    """What an engine of ``kind`` for a model whose primary modality is ``modality`` can do
    (names from ``CAPABILITIES``), from the table alone: nothing is imported, and whether its
    library is installed is ``is_available``'s business. frozenset() for a kind (or kind and
    modality) with no engine, planned kinds included."""
    entry = _entry(kind, modality)
    return entry.capabilities if entry is not None else frozenset()


def create_engine(kind: str, modality: str | None = None):
    """A new, unloaded engine for a model of ``kind`` whose primary modality is ``modality``."""
    entry = _entry(kind, modality)
    if entry is None or not _module_exists(entry.module):
        raise EngineNotBuilt(kind, modality, PLANNED.get(kind, ""))
    return getattr(importlib.import_module(entry.module), entry.cls)()


def prepare(kind: str, modality: str | None = None) -> bool:
    """Run the ``Entry.prepare`` function of the engine for ``kind`` and ``modality``; False
    (nothing run) for an engine without one or whose module is not there. Blocks: seconds
    for docling. A library the function needs but cannot import is the model's load's to
    report; the function ignores it."""
    entry = _entry(kind, modality)
    if entry is None or entry.prepare is None or not _module_exists(entry.module):
        return False
    getattr(importlib.import_module(entry.module), entry.prepare)()
    return True


def is_available(kind: str, modality: str | None = None) -> bool:
    entry = _entry(kind, modality)
    return entry is not None and _module_exists(entry.module)
