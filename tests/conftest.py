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
