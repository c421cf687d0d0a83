"""The catalog against the pinned engine and the spec's lineup (issue 18): every entry's
architecture is one the installed llama.cpp loads (asked of the engine itself), entries that
need a newer llama.cpp are refused with the reason by pull, POST /v1/models and the
advisor, pull --dry-run lists the exact files, the spec's Gemma 4 block passes the startup
checks with placeholder files, and every shipped example config passes them too."""
from __future__ import annotations

import json
import logging
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hypnos.catalog.blocks import config_block
from hypnos.catalog.catalog import UnsupportedEntry, load_catalog
from hypnos.cli.main import cli
from hypnos.service.config.load import load_config, parse_config
from hypnos.service.scheduling.model_checks import startup_checks

CATALOG = load_catalog()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "service" / "examples"
LLAMA_ENTRIES = [e for e in CATALOG.entries if e.engine == "ggml_llama"]


# ---------------------------------------------------------------- the engine's own list

class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _header_only_gguf(path: Path, arch: str) -> Path:
    import gguf
    w = gguf.GGUFWriter(str(path), arch)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def engine_load_log(arch: str, tmp_path: Path) -> list[str]:
    """What the installed llama.cpp logs loading a GGUF that names ``arch`` and nothing
    else (vocab_only). An architecture it does not know stops at "unknown model
    architecture"; one it knows gets past it (to the vocabulary, which the file lacks)."""
    from llama_cpp import llama_cpp as ll
    from hypnos.engines.llama.log import route_once
    route_once(ll, "hypnos.engines.llama.cpp", ll.llama_log_set)
    ll.llama_backend_init()
    logger = logging.getLogger("hypnos.engines.llama.cpp")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        path = _header_only_gguf(tmp_path / f"{arch}.gguf", arch)
        params = ll.llama_model_default_params()
        params.vocab_only = True
        model = ll.llama_model_load_from_file(str(path).encode(), params)
        if model:
            ll.llama_model_free(model)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return handler.lines


def engine_knows(arch: str, tmp_path: Path) -> bool:
    lines = engine_load_log(arch, tmp_path)
    if any("unknown model architecture" in line for line in lines):
        return False
    # It must have got past the architecture, else this probe proves nothing.
    assert any(re.search(r"error loading model (hyperparameters|vocabulary)", line)
               for line in lines), lines
    return True


def test_the_probe_tells_known_from_unknown(tmp_path):
    assert engine_knows("llama", tmp_path)
    assert not engine_knows("hypnos-no-such-arch", tmp_path)


@pytest.mark.parametrize("arch", sorted({e.architecture for e in LLAMA_ENTRIES}))
def test_every_catalog_architecture_against_the_engine(arch, tmp_path):
    needs = {e.requires_llama_cpp for e in LLAMA_ENTRIES if e.architecture == arch}
    if needs == {None}:
        assert engine_knows(arch, tmp_path), \
            f"the pinned engine cannot load {arch!r}: give its entries requires_llama_cpp"
    else:
        assert None not in needs, f"{arch}: some entries need a newer llama.cpp, some not"
        assert not engine_knows(arch, tmp_path), \
            f"the engine now loads {arch!r}: drop requires_llama_cpp from its entries"


@pytest.mark.parametrize("arch", CATALOG.tested_architectures)
def test_every_tested_architecture_loads(arch, tmp_path):
    assert engine_knows(arch, tmp_path)


def test_the_engine_pin_is_the_installed_one():
    import llama_cpp
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f"llama-cpp-python=={CATALOG.engine.llama_cpp_python}" in pyproject
    assert llama_cpp.__version__ == CATALOG.engine.llama_cpp_python
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", CATALOG.engine.llama_cpp_date)


# ---------------------------------------------------------------- data rules

def test_entries_carry_release_dates_and_well_formed_hashes():
    for e in CATALOG.entries:
        assert re.fullmatch(r"(19|20)\d\d-(0[1-9]|1[0-2])(-\d\d)?", e.released), e.id
        if e.requires_llama_cpp is not None:
            assert re.fullmatch(r"b\d+", e.requires_llama_cpp), e.id
        for v in e.variants:
            for f in v.files:
                if f.sha256 is not None:
                    assert re.fullmatch(r"[0-9a-f]{64}", f.sha256), (e.id, f.local)
    for e in CATALOG.lineup():
        for f in e.default_variant().files:
            assert f.is_folder or f.sha256, f"{e.id}: {f.local} has no sha256"


def test_the_spec_lineup_ids_exist():
    for spec_id in ("gemma4:26b-q4", "gemma4:e4b-q4", "gemmaembedding2", "gliner2.5-multi"):
        assert CATALOG.get(spec_id) is not None, spec_id
    e4b = CATALOG.get("gemma4:e4b-q4")
    assert {"vision", "speech_to_text"} <= set(e4b.modalities)
    assert e4b.default_variant().file_for("aux") is not None


def test_files_shared_between_variants_agree():
    """One local path, one file: the same size and sha256 wherever it appears."""
    seen: dict[str, tuple] = {}
    for e in CATALOG.entries:
        for v in e.variants:
            for f in v.files:
                key = (f.repo, f.remote, tuple(f.pypi), f.size, f.sha256)
                assert seen.setdefault(f.local, key) == key, f.local


# ---------------------------------------------------------------- entries the engine cannot run

def test_lfm3_is_refused_at_once_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPNOS_MODELS_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["models", "pull", "lfm3-vl:2b"])
    assert r.exit_code == 1, r.output
    assert "needs llama.cpp b11960 or newer" in r.output
    assert f"llama-cpp-python {CATALOG.engine.llama_cpp_python}" in r.output
    assert CATALOG.engine.llama_cpp_date in r.output
    assert list(tmp_path.iterdir()) == []                  # nothing was fetched


def test_force_downloads_anyway(tmp_path, monkeypatch):
    """--force goes to the hub (offline here, so the pull itself fails, past the refusal)."""
    monkeypatch.setenv("HYPNOS_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["models", "pull", "lfm3-vl:2b", "--force"])
    assert "needs llama.cpp" not in r.output
    assert r.exit_code == 1 and "the hub cannot be reached" in r.output, r.output


def test_the_advisor_never_picks_an_entry_the_engine_cannot_run():
    from hypnos.advisor import advise
    for needs in (["embeddings"], ["vision"], ["chat", "vision", "transcription"]):
        body = advise(CATALOG, needs, vram_bytes=24 << 30, ram_bytes=64 << 30,
                      unified_memory=False)
        ids = {m["id"] for m in body["models"]}
        assert not any(CATALOG.get(i).requires_llama_cpp for i in ids), ids


@pytest.mark.anyio
async def test_post_v1_models_refuses_it_with_the_same_reason(tmp_path):
    from sanic import Sanic
    from hypnos.service.app import create_app
    Sanic.test_mode = True
    cfg = parse_config({"models_dir": str(tmp_path)})
    app = create_app(cfg, catalog=CATALOG, stage=False)
    _req, resp = await app.asgi_client.post("/v1/models", json={"catalog": "lfm3-vl:2b"})
    assert resp.status == 400, resp.text
    message = resp.json["error"]["message"]
    with pytest.raises(UnsupportedEntry) as refused:
        CATALOG.check_supported(CATALOG.get("lfm3-vl:2b"))
    assert message == str(refused.value)
    assert "b11960" in message


# ---------------------------------------------------------------- dry run

def test_dry_run_lists_the_exact_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPNOS_MODELS_DIR", str(tmp_path))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.chdir(tmp_path)
    entry, variant = CATALOG.resolve("gemma4:e4b-q4")
    r = CliRunner().invoke(cli, ["models", "pull", "gemma4:e4b-q4", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    (item,) = json.loads(r.output)["dry_run"]
    assert item["spec"] == f"gemma4:e4b-q4:{variant.quant}"
    assert item["size_bytes"] == sum(f.size for f in variant.files)
    for row, f in zip(item["files"], variant.files, strict=True):
        assert row["size"] == f.size and row["sha256"] == f.sha256 and not row["present"]
        assert row["url"] == f"https://huggingface.co/{f.repo}/resolve/main/{f.remote}"
    r = CliRunner().invoke(cli, ["models", "pull", "gemma4:e4b-q4", "--dry-run"])
    assert r.exit_code == 0 and str(variant.files[0].size) in r.output
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- placeholder files, real checks

def write_placeholder_gguf(path: Path, arch: str) -> None:
    """A GGUF with the right header (architecture and shape keys, one tensor), no weights."""
    import gguf
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_feed_forward_length(16)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def place_files(cfg, m) -> None:
    """Placeholders for every file a model block names: GGUFs for llama.cpp models (the
    projector as "clip"), empty files or a folder with one file otherwise."""
    for key, rel in m.file_paths().items():
        path = cfg.models_dir / rel
        if m.engine == "ggml_llama":
            arch = m.arch.architecture if key == "weights_path" else "clip"
            write_placeholder_gguf(path, arch)
        elif key == "weights_path" and "." not in Path(rel).name:
            path.mkdir(parents=True, exist_ok=True)
            (path / "model.bin").write_bytes(b"\0" * 16)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"\0" * 16)


def test_catalog_block_gemma4_passes_the_startup_checks(tmp_path, monkeypatch):
    monkeypatch.delenv("HYPNOS_MODELS_DIR", raising=False)      # the config's models_dir
    r = CliRunner().invoke(cli, ["catalog-block", "gemma4:26b-q4"])
    assert r.exit_code == 0, r.output
    config = tmp_path / "hypnos.toml"
    config.write_text(f'models_dir = "{tmp_path / "models"}"\n' + r.output)
    cfg = load_config(config, env={})
    (m,) = cfg.models
    _st, problems = startup_checks(cfg, m, CATALOG.tested_architectures)
    assert problems and "not in models_dir" in problems[0]          # files absent
    place_files(cfg, m)
    st, problems = startup_checks(cfg, m, CATALOG.tested_architectures)
    assert problems == [] and st is not None
    check = CliRunner().invoke(cli, ["serve", "--check", "--config", str(config)])
    assert check.exit_code == 0, check.output
    assert "ok: 1 models configured" in check.output
    # The same block with a header of another family is refused.
    write_placeholder_gguf(cfg.models_dir / m.weights_path, "gemma3")
    _st, problems = startup_checks(cfg, m, CATALOG.tested_architectures)
    assert problems and "'gemma3'" in problems[0]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_passes_the_startup_checks(path, tmp_path):
    data = tomllib.loads(path.read_text())
    data["models_dir"] = str(tmp_path / "models")
    cfg = parse_config(data, base_dir=tmp_path)
    assert cfg.models
    for i, m in enumerate(cfg.models):
        place_files(cfg, m)
        _st, problems = startup_checks(cfg, m, CATALOG.tested_architectures, f"models[{i}]")
        assert problems == [], (m.id, problems)


def test_gemma4_example_is_the_spec_lineup():
    cfg = load_config(EXAMPLES / "hypnos.gemma4.example.toml", env={})
    ids = [m.id for m in cfg.models]
    assert ids[:2] == ["gemma4:26b-q4", "gemma4:e4b-q4"]
    assert {"docling", "gliner2.5-multi"} <= set(ids)
    for m in cfg.models:
        entry = CATALOG.get(m.id)
        if entry is not None:
            assert config_block(entry, entry.variant(m.quant))     # a catalog variant
