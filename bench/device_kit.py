"""The GPU check kit (issue 27): writes ``.devkit/`` (ignored, at most 60 MiB) for one call on a
lent GPU machine that has no network, then prints the call to make.

    python bench/device_kit.py [--out .devkit] [--sdist PATH] [--skip-wheels]

``.devkit/`` holds
  * ``llama-cpp-python-<v>-trimmed.tar.gz``: the llama-cpp-python sdist with its vendored
    llama.cpp, cut down to what a CUDA + CPU + RPC build of the shared libraries, mtmd and
    ``llama-server`` and the pure-Python ``llama_cpp`` package need (``keep``);
  * ``wheels/``: one CPython 3.12 manylinux x86_64 wheel per project the device image lacks
    (``WANTED`` and their dependencies, less ``IMAGE_HAS``), at the versions this machine's
    venv runs;
  * ``manifest.json``: what is in it, sizes, and the source's member count.

The project itself travels as the working tree. ``bench/gpu_check.sh`` consumes the kit.
The sdist comes from ``--sdist``, else ``/tmp/hypnos-devkit/`` (a previous run), else
``pip download --no-binary :all:`` (PyPI); the wheels from ``pip download --only-binary``.
"""
from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
LLAMA_CPP_PYTHON = "0.3.36"
MIB = 2**20
LIMIT = 60 * MIB
CACHE = Path("/tmp/hypnos-devkit")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
# The device call: a lease of 15 minutes (the machine's start included) holds one call that
# builds, probes and checks (bench/gpu_lease.sh); a warm machine goes back 30 s after a call,
# so two calls in a row are a gamble.
CALLS = ('run(command="bash bench/gpu_lease.sh", carry=[".devkit"], timeout_s=545)',)

# Hypnos's base install and llama_cpp's runtime needs that the device image lacks.
WANTED = ("sanic", "sanic-testing", "pydantic", "pydantic-core", "tomlkit", "gguf",
          "diskcache", "typing-extensions",
          # /mcp's SDK (about 6.5 MiB of wheels with its dependencies, cryptography the most);
          # without it the server still starts and /mcp answers 503.
          "mcp")
# What the device image already has (issue 27), with the usual dependencies of those: their
# wheels are left out of the kit (the image's copies satisfy the resolver there).
IMAGE_HAS = frozenset("""numpy jinja2 markupsafe psutil rich click httpx httpcore anyio idna
certifi h11 sniffio huggingface-hub prometheus-client nvidia-ml-py pyyaml tqdm requests urllib3
charset-normalizer filelock fsspec packaging pygments markdown-it-py mdurl hf-xet
torch cupy""".split())

# Inside vendor/llama.cpp: folders the build never reads.
LLAMA_DROP_DIRS = frozenset({"models", "docs", "tests", "examples", "pocs", "benches", "media",
                             "gguf-py", "conversion", "grammars", "requirements", "ci",
                             "skills", "app", ".devops", ".github", "licenses-npm"})
# ggml backends other than CPU, CUDA and RPC.
OTHER_BACKENDS = frozenset({"ggml-blas", "ggml-cann", "ggml-et", "ggml-hip", "ggml-metal",
                            "ggml-musa", "ggml-virtgpu", "ggml-sycl", "ggml-vulkan",
                            "ggml-webgpu", "ggml-zdnn", "ggml-opencl", "ggml-hexagon",
                            "ggml-zendnn", "ggml-openvino", "ggml-kompute"})
# tools/ui: only what its CMake step reads when the prebuilt UI is off (no npm, no network).
UI_KEEP = frozenset({"CMakeLists.txt", "ui.cpp.in", "ui.h.in", "sources.cmake"})
# The llama-cpp-python top level: the package and what its pyproject/CMake read.
TOP_KEEP = frozenset({"CMakeLists.txt", "pyproject.toml", "README.md", "LICENSE.md",
                      "PKG-INFO", "llama_cpp", "vendor"})


def keep(rel: str) -> bool:
    """Whether the sdist member ``rel`` (its path below the sdist's top folder) goes into the
    trimmed source. Pure; the rules are the module's constants."""
    parts = PurePosixPath(rel).parts
    if not parts or parts[0] not in TOP_KEEP:
        return False
    if parts[0] != "vendor":
        return True
    if len(parts) < 2 or parts[1] != "llama.cpp":
        return False
    inner = parts[2:]
    if not inner:
        return True
    name = inner[-1]
    if len(inner) == 1:
        return not (name in LLAMA_DROP_DIRS or name.startswith("convert_")
                    or name.endswith((".py", ".md", ".nix", ".toml", ".ini", ".json"))
                    or name in ("AUTHORS", "CODEOWNERS", "build-xcframework.sh"))
    top = inner[0]
    if top in LLAMA_DROP_DIRS:
        return False
    if top == "scripts":
        return name.endswith(".cmake") or name == "build-info.sh"
    if top == "ggml" and len(inner) >= 3 and inner[1] == "src" and inner[2] in OTHER_BACKENDS:
        return False
    if top == "tools":
        if len(inner) >= 3 and inner[1] == "ui":
            return len(inner) == 3 and name in UI_KEEP
        if len(inner) >= 3 and inner[2] in ("tests", "bench", "webui", "public_legacy"):
            return False
        if name.endswith((".md", ".png", ".jpg", ".gif", ".py", ".sh")):
            return False
    return True


@dataclass
class Trimmed:
    path: Path
    kept: int = 0
    dropped: int = 0
    kept_bytes: int = 0
    dropped_bytes: int = 0
    top: str = ""
    sample_dropped: list[str] = field(default_factory=list)


def trim_sdist(sdist: Path, out: Path) -> Trimmed:
    """Copy the members of ``sdist`` (a .tar.gz with one top folder) that ``keep`` accepts into
    the .tar.gz ``out``; links are kept only when ``keep`` accepts them too. Returns counts."""
    result = Trimmed(out)
    with tarfile.open(sdist) as src, tarfile.open(out, "w:gz", compresslevel=9) as dst:
        for member in src:
            top, _, rel = member.name.partition("/")
            result.top = result.top or top
            if rel and not keep(rel):
                result.dropped += 1
                result.dropped_bytes += member.size
                if len(result.sample_dropped) < 5 and member.isfile():
                    result.sample_dropped.append(rel)
                continue
            data = src.extractfile(member) if member.isfile() else None
            dst.addfile(member, io.BytesIO(data.read()) if data else None)
            result.kept += 1
            result.kept_bytes += member.size
    return result


def find_sdist(explicit: Path | None) -> Path:
    """The llama-cpp-python sdist: ``explicit``, else a copy in CACHE, else downloaded there."""
    if explicit is not None:
        return explicit
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if (CACHE / name).is_file():
        return CACHE / name
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(CACHE)], check=True)
    return CACHE / name


def pinned(project: str) -> str:
    """``project==<the version this venv runs>``, or the bare name when it is not installed."""
    try:
        return f"{project}=={metadata.version(project)}"
    except metadata.PackageNotFoundError:
        return project


def normalized(name: str) -> str:
    """A project name as IMAGE_HAS and WANTED spell it (``Pydantic_Core`` -> pydantic-core)."""
    return name.strip().lower().replace("_", "-").replace(".", "-")


def project_of(wheel: Path) -> str:
    """The normalized project name of a wheel file (``Pydantic_Core-2.1-..`` -> pydantic-core)."""
    return normalized(wheel.name.split("-")[0])


def download_wheels(dest: Path) -> list[Path]:
    """Download WANTED and their dependencies as cp312 manylinux wheels into ``dest`` (pip,
    PyPI), then ``prune`` it. Returns the wheels kept."""
    dest.mkdir(parents=True, exist_ok=True)
    plat = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--only-binary", ":all:",
                    "--python-version", "3.12", "--implementation", "cp", *plat, "-d",
                    str(dest), *[pinned(p) for p in WANTED]], check=True)
    return prune(dest)


def prune(dest: Path) -> list[Path]:
    """Delete the wheels in ``dest`` whose project IMAGE_HAS covers, and any that is not for
    CPython 3.12 (or pure Python) on x86_64 Linux; return the rest, sorted."""
    kept = []
    for wheel in sorted(dest.glob("*.whl")):
        tags = wheel.name[:-4].split("-")[-3:]
        fits = tags[0] in ("py3", "cp312", "py2.py3") and (
            tags[2] == "any" or ("linux" in tags[2] and "x86_64" in tags[2]))
        if project_of(wheel) in IMAGE_HAS or not fits:
            wheel.unlink()
        else:
            kept.append(wheel)
    return kept


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(out: Path, sdist: Path, with_wheels: bool) -> dict:
    """Write the kit into ``out`` (replaced) and return its manifest."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    trimmed = trim_sdist(sdist, out / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-trimmed.tar.gz")
    wheels = download_wheels(out / "wheels") if with_wheels else []
    manifest = {
        "llama_cpp_python": LLAMA_CPP_PYTHON, "source": trimmed.path.name,
        "source_top": trimmed.top, "source_members": trimmed.kept,
        "source_bytes_unpacked": trimmed.kept_bytes, "dropped_members": trimmed.dropped,
        "dropped_bytes_unpacked": trimmed.dropped_bytes,
        "wheels": {project_of(w): w.name for w in wheels},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    manifest["total_bytes"] = folder_size(out)
    return manifest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".devkit")
    ap.add_argument("--sdist", type=Path, help="a llama-cpp-python sdist already on disk")
    ap.add_argument("--skip-wheels", action="store_true", help="the source only")
    args = ap.parse_args()
    manifest = build(args.out, find_sdist(args.sdist), not args.skip_wheels)
    total = manifest["total_bytes"]
    src = (args.out / manifest["source"]).stat().st_size
    print(f"{args.out}: {total / MIB:.1f} MiB (limit {LIMIT / MIB:.0f} MiB): source "
          f"{src / MIB:.1f} MiB ({manifest['source_members']} members, "
          f"{manifest['dropped_members']} dropped), {len(manifest['wheels'])} wheels: "
          + ", ".join(sorted(manifest["wheels"])))
    if total > LIMIT:
        print(f"too large: {total / MIB:.1f} MiB > {LIMIT / MIB:.0f} MiB", file=sys.stderr)
        return 1
    print("the device call:\n  " + "\n  ".join(CALLS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
