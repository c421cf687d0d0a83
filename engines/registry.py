"""Engine kind -> engine class. Modules are imported only when a model of that kind loads,
so a missing optional library is a 503 naming its extra, not an ImportError at start-up."""
from __future__ import annotations

import importlib

from hypnos.engines.base import EngineUnavailable

# kind -> (module, class, pip extra)
ENGINES = {
    "ggml_llama": ("hypnos.engines.llama", "LlamaChatEngine", "llama"),
}
PLANNED = {
    "faster_whisper": "stt", "ggml_whisper": "stt", "onnx_runtime": "tts",
    "docling": "docs", "gliner": "ner", "ggml_diffusion": "images",
}


class EngineNotBuilt(EngineUnavailable):
    """The engine kind is valid but this version of Hypnos has no implementation of it."""

    def __init__(self, kind: str):
        self.engine = kind
        self.extra = PLANNED.get(kind, "")
        Exception.__init__(self, f"engine {kind} is not implemented in this version of Hypnos")


def create_engine(kind: str, modalities: list[str] | None = None):
    if kind not in ENGINES:
        raise EngineNotBuilt(kind)
    module, cls, _extra = ENGINES[kind]
    return getattr(importlib.import_module(module), cls)()


def is_available(kind: str) -> bool:
    return kind in ENGINES
