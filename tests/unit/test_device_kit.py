"""bench/device_kit.py: the trimming rules on a fake sdist laid out like llama-cpp-python
0.3.36's, the kit's manifest, the wheel pruning, and that every base dependency of Hypnos is
either carried or in the device image; and the size bound on the real kit (issue 40), built
from the sdist cached in /tmp/hypnos-devkit (downloaded from PyPI once when missing) and the
wheels pip downloads (its cache serves a rerun): about 20 s, skipped only when neither the
cache nor PyPI is there."""
from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import device_kit as kit  # noqa: E402

L = "vendor/llama.cpp/"
KEPT = ["CMakeLists.txt", "pyproject.toml", "README.md", "LICENSE.md", "llama_cpp/llama.py",
        "llama_cpp/server/app.py", L + "CMakeLists.txt", L + "LICENSE", L + "cmake/common.cmake",
        L + "include/llama.h", L + "src/llama.cpp", L + "common/common.cpp",
        L + "ggml/CMakeLists.txt", L + "ggml/src/ggml.c", L + "ggml/src/ggml-cuda/fattn.cu",
        L + "ggml/src/ggml-cuda/template-instances/a.cu", L + "ggml/src/ggml-cpu/ggml-cpu.c",
        L + "ggml/src/ggml-rpc/ggml-rpc.cpp", L + "tools/CMakeLists.txt",
        L + "tools/server/server.cpp", L + "tools/server/CMakeLists.txt",
        L + "tools/mtmd/mtmd.cpp", L + "tools/quantize/quantize.cpp",
        L + "tools/ui/CMakeLists.txt", L + "tools/ui/ui.cpp.in", L + "tools/ui/sources.cmake",
        L + "scripts/ui-assets.cmake", L + "scripts/build-info.sh",
        L + "vendor/cpp-httplib/httplib.h", L + "vendor/miniaudio/miniaudio.h"]
DROPPED = ["docs/index.md", "examples/server.py", "tests/test_llama.py", "docker/Dockerfile",
           L + "models/ggml-vocab-llama-bpe.gguf", L + "docs/build.md", L + "tests/t.cpp",
           L + "examples/simple/simple.cpp", L + "gguf-py/gguf/gguf.py",
           L + "convert_hf_to_gguf.py", L + "AUTHORS", L + "media/logo.png",
           L + "ggml/src/ggml-vulkan/ggml-vulkan.cpp", L + "ggml/src/ggml-metal/m.metal",
           L + "ggml/src/ggml-sycl/s.cpp", L + "ggml/src/ggml-opencl/o.cpp",
           L + "ggml/src/ggml-hip/CMakeLists.txt", L + "ggml/src/ggml-cann/c.cpp",
           L + "tools/server/tests/unit/test_basic.py", L + "tools/server/README.md",
           L + "tools/ui/src/app.ts", L + "tools/ui/package-lock.json",
           L + "scripts/sync-ggml.sh", L + "scripts/compare-llama-bench.py"]


@pytest.mark.parametrize("rel", KEPT)
def test_what_the_build_reads_is_kept(rel):
    assert kit.keep(rel)


@pytest.mark.parametrize("rel", DROPPED)
def test_vocab_files_docs_tests_and_other_backends_are_dropped(rel):
    assert not kit.keep(rel)


def fake_sdist(path: Path) -> Path:
    top = "llama_cpp_python-0.3.36/"
    with tarfile.open(path, "w:gz") as tar:
        for rel in KEPT + DROPPED:
            data = f"contents of {rel}\n".encode() * (1000 if "models/" in rel else 1)
            info = tarfile.TarInfo(top + rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_trimmed_source_holds_exactly_the_kept_members(tmp_path):
    sdist = fake_sdist(tmp_path / "sdist.tar.gz")
    trimmed = kit.trim_sdist(sdist, tmp_path / "trimmed.tar.gz")
    with tarfile.open(trimmed.path) as tar:
        names = sorted(m.name.split("/", 1)[1] for m in tar)
        body = tar.extractfile("llama_cpp_python-0.3.36/" + L + "src/llama.cpp").read()
    assert names == sorted(KEPT)
    assert body == f"contents of {L}src/llama.cpp\n".encode()
    assert (trimmed.kept, trimmed.dropped, trimmed.top) == \
        (len(KEPT), len(DROPPED), "llama_cpp_python-0.3.36")


def test_the_kit_manifest_and_size(tmp_path):
    out = tmp_path / ".devkit"
    (out / "stale").mkdir(parents=True)
    manifest = kit.build(out, fake_sdist(tmp_path / "sdist.tar.gz"), with_wheels=False)
    assert not (out / "stale").exists()
    assert sorted(p.name for p in out.iterdir()) == \
        ["llama-cpp-python-0.3.36-trimmed.tar.gz", "manifest.json"]
    assert manifest["source_members"] == len(KEPT)
    assert manifest["dropped_members"] == len(DROPPED)
    assert 0 < manifest["total_bytes"] <= kit.LIMIT


def test_prune_keeps_cp312_linux_wheels_the_image_lacks(tmp_path):
    names = ["sanic-25.12.1-py3-none-any.whl",
             "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
             "numpy-2.3.0-cp312-cp312-manylinux_2_28_x86_64.whl",
             "httpx-0.28.1-py3-none-any.whl",
             "ujson-6.1.0-cp311-cp311-manylinux2014_x86_64.whl",
             "uvloop-0.23.0-cp312-cp312-macosx_11_0_arm64.whl"]
    for n in names:
        (tmp_path / n).write_bytes(b"")
    kept = kit.prune(tmp_path)
    assert [w.name for w in kept] == sorted(names[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[:2])


def test_every_base_dependency_is_carried_or_in_the_image():
    """A dependency added to pyproject.toml must reach the device: in WANTED or IMAGE_HAS."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower()
             for d in deps}
    missing = names - set(kit.WANTED) - kit.IMAGE_HAS
    assert not missing, f"not in the kit nor the image: {sorted(missing)}"


def requirement_closure(names) -> set[str]:
    """``names`` and what they require, as installed here (extras left out)."""
    import re
    from importlib import metadata
    seen: set[str] = set()
    todo = [kit.normalized(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [kit.normalized(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0])
                 for r in reqs if "extra ==" not in r]
    return seen


IMPORTS = """
import json, sys, tomllib
from importlib import metadata
sys.path.insert(0, sys.argv[1])
import gpu_check, gpu_checks_engine, gpu_checks_serving, synthetic_gguf
import hypnos.cli.main, hypnos.engines.llama.engine, llama_cpp.mtmd_cpp
from sanic import Sanic
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config
Sanic.test_mode = True
create_app(parse_config(tomllib.loads('models_dir = "/tmp"')), stage=False, name="kit")
owners = metadata.packages_distributions()
tops = {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names)
print(json.dumps(sorted({d for t in tops for d in owners.get(t, [])})))
"""


def test_what_the_check_imports_comes_with_the_kit_or_the_image():
    """Every distribution that the GPU check's modules and the app import (in a clean
    interpreter) is in the device image, in the kit's wheels (WANTED and what they require)
    or is llama-cpp-python (the kit's source)."""
    import json
    import subprocess
    out = subprocess.run([sys.executable, "-c", IMPORTS, str(ROOT / "bench")], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    used = {kit.normalized(d) for d in json.loads(out.strip().splitlines()[-1])}
    covered = requirement_closure(kit.WANTED) | kit.IMAGE_HAS | {"llama-cpp-python", "hypnos"}
    assert "sanic" in used and "pydantic" in used
    assert used - covered == set()


@pytest.fixture(scope="module")
def real_kit(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit") / ".devkit"
    try:
        manifest = kit.build(out, kit.find_sdist(None), with_wheels=True)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"no cached llama-cpp-python sdist in {kit.CACHE} and no PyPI: {exc}")
    return out, manifest


@pytest.mark.slow
def test_the_real_kit_fits_the_carry_limit(real_kit):
    out, manifest = real_kit
    assert manifest["total_bytes"] == kit.folder_size(out) <= kit.LIMIT
    # The trim did its work on the real sdist (73 MiB): most members are gone.
    assert manifest["dropped_bytes_unpacked"] > manifest["source_bytes_unpacked"]


@pytest.mark.slow
def test_the_real_kit_holds_what_gpu_check_sh_builds_and_installs(real_kit):
    out, manifest = real_kit
    (source,) = out.glob("llama-cpp-python-*-trimmed.tar.gz")     # gpu_check.sh's glob
    with tarfile.open(source) as tar:
        names = {m.name.split("/", 1)[1] for m in tar if "/" in m.name}
    for rel in ("llama_cpp/__init__.py", "llama_cpp/llama_cpp.py", L + "CMakeLists.txt",
                L + "ggml/src/ggml-cuda/CMakeLists.txt", L + "ggml/src/ggml-rpc/ggml-rpc.cpp",
                L + "tools/server/server.cpp", L + "tools/mtmd/CMakeLists.txt"):
        assert rel in names, rel
    assert not [n for n in names if n.startswith((L + "models/", L + "ggml/src/ggml-vulkan/"))]
    wanted = {kit.normalized(w) for w in kit.WANTED} - kit.IMAGE_HAS
    assert wanted <= set(manifest["wheels"])
    assert all(w.endswith(".whl") and ("-py3-" in w or "-cp312-" in w)
               for w in manifest["wheels"].values())
