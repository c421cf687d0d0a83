"""engines/registry.py: what each engine kind can do, known without loading or importing it
(pure: no model, no engine library)."""
import importlib
import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from hypnos.engines import protocols, registry
from hypnos.engines.registry import (CAPABILITIES, CHAT, COMPLETE, CONVERT, EMBED, ENGINES,
                                     EXTRACT, IMAGES, METHODS, PARK, RERANK, SESSIONS, SPEAK,
                                     TRANSCRIBE, VISION, capabilities)

EXPECTED = {
    ("ggml_llama", None): {CHAT, COMPLETE, VISION, PARK, SESSIONS, RERANK},
    ("ggml_llama", "embeddings"): {EMBED},
    ("ggml_llama", "rerank"): {RERANK},
    ("onnx_runtime", "embeddings"): {EMBED},
    ("onnx_runtime", "text_to_speech"): {SPEAK},
    ("faster_whisper", None): {TRANSCRIBE},
    ("docling", None): {CONVERT},
    ("gliner", None): {EXTRACT},
    ("ggml_diffusion", None): {IMAGES},
}
#: The library each engine module imports when it loads.
LIBRARY = {
    "hypnos.engines.llama.engine": "llama_cpp", "hypnos.engines.llama.embed": "llama_cpp",
    "hypnos.engines.llama.rerank": "llama_cpp",
    "hypnos.engines.onnx_embed": "onnxruntime", "hypnos.engines.kokoro": "kokoro_onnx",
    "hypnos.engines.whisper": "faster_whisper", "hypnos.engines.docling_convert": "docling",
    "hypnos.engines.gliner_ner": "gliner", "hypnos.engines.sd_diffusion": "stable_diffusion_cpp",
}
#: The Protocol whose members a capability promises.
PROTOCOL = {
    CHAT: protocols.ChatEngine, COMPLETE: protocols.ChatEngine, VISION: protocols.ChatEngine,
    PARK: protocols.KVChatEngine, SESSIONS: protocols.KVChatEngine,
    EMBED: protocols.Embedder, RERANK: protocols.Reranker, TRANSCRIBE: protocols.Transcriber,
    SPEAK: protocols.Speaker,
    CONVERT: protocols.Converter, EXTRACT: protocols.Extractor, IMAGES: protocols.ImageGenerator,
}
HEAVY = ("llama_cpp", "torch", "onnxruntime", "docling", "faster_whisper", "gliner",
         "ctranslate2", "kokoro_onnx", "stable_diffusion_cpp", "numpy")


def test_every_table_entry_declares_its_capabilities():
    assert set(ENGINES) == set(EXPECTED)
    for (kind, modality), caps in EXPECTED.items():
        assert capabilities(kind, modality) == frozenset(caps), (kind, modality)
        assert capabilities(kind, modality) <= CAPABILITIES


def test_capabilities_of_a_kind_follow_create_engines_lookup():
    # A modality without its own entry falls back to the kind's entry (modality None).
    assert capabilities("ggml_llama", "chat") == capabilities("ggml_llama")
    assert capabilities("ggml_llama", "vision") == frozenset(EXPECTED[("ggml_llama", None)])
    assert capabilities("faster_whisper", "speech_to_text") == {TRANSCRIBE}


def test_unknown_or_unbuilt_kinds_have_no_capabilities():
    assert capabilities("no_such_engine") == frozenset()
    assert capabilities("no_such_engine", "chat") == frozenset()
    assert capabilities("onnx_runtime") == frozenset()          # only per modality
    assert capabilities("onnx_runtime", "chat") == frozenset()
    assert capabilities("ggml_whisper") == frozenset()          # planned, not built
    assert isinstance(capabilities("no_such_engine"), frozenset)


def test_every_capability_names_its_methods():
    assert set(METHODS) == set(CAPABILITIES)
    for cap, names in METHODS.items():
        members = _protocol_members(PROTOCOL[cap])
        assert names and set(names) <= members, cap


def test_capabilities_import_no_engine_library_nor_engine_module():
    probe = """
import json, sys
before = set(sys.modules)
from hypnos.engines.registry import ENGINES, capabilities
caps = {f"{k}/{m}": sorted(capabilities(k, m)) for k, m in ENGINES}
caps["unknown"] = sorted(capabilities("no_such_engine"))
print(json.dumps({"new": sorted(set(sys.modules) - before), "caps": caps}))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    result = json.loads(out.strip().splitlines()[-1])
    new = result["new"]
    assert not [m for m in new if m.split(".")[0] in HEAVY], new
    engine_modules = {entry.module for entry in ENGINES.values()}
    assert not engine_modules & set(new), new
    assert result["caps"]["ggml_llama/None"] == sorted(EXPECTED[("ggml_llama", None)])
    assert result["caps"]["unknown"] == []


@pytest.mark.parametrize("key", sorted(ENGINES, key=str), ids=lambda k: f"{k[0]}-{k[1]}")
def test_each_engine_class_has_what_its_capabilities_promise(key):
    entry = ENGINES[key]
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    engine = cls()                                   # cheap: imports nothing heavy
    for name in ("load", "unload"):
        assert callable(getattr(engine, name, None)), name
    for cap in entry.capabilities:
        for name in METHODS[cap]:
            assert callable(getattr(engine, name, None)), (entry.cls, cap, name)
        for name in _protocol_members(PROTOCOL[cap]):
            assert hasattr(engine, name), (entry.cls, PROTOCOL[cap].__name__, name)


def test_create_engine_and_is_available_use_the_same_table():
    with pytest.raises(registry.EngineNotBuilt) as err:
        registry.create_engine("ggml_whisper")
    assert err.value.extra == "stt" and err.value.engine == "ggml_whisper"
    with pytest.raises(registry.EngineNotBuilt):
        registry.create_engine("no_such_engine", "chat")
    assert not registry.is_available("no_such_engine")
    assert registry.is_available("ggml_llama")        # a hypnos module: always present


def _protocol_members(proto) -> set[str]:
    """The methods and properties a Protocol (and the Protocols it extends) declares."""
    names = set()
    for klass in proto.__mro__:
        if klass in (object,) or klass.__module__ in ("typing", "typing_extensions"):
            continue
        names |= {n for n in vars(klass) if not n.startswith("_")}
    return names
