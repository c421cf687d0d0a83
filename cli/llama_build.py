"""llama.cpp builds kept once per machine, outside any clone (stdlib only: ``./run.sh`` runs
it with the system python3 before the venv exists).

    llama_build.py wheel --venv V     install llama-cpp-python built with GGML_RPC=ON (CPU)
    llama_build.py rpc-server         print the path of llama.cpp's rpc-server, building it once

Both come from the llama-cpp-python sdist Hypnos pins, so the RPC protocol of the workers is
the one the engine speaks. The cache is ``$HYPNOS_BUILD_CACHE`` (default
``${XDG_CACHE_HOME:-~/.cache}/hypnos``), one folder per version and CMake arguments:

- ``wheels/llama_cpp_python-<version>-<tag>/``: the wheel. Never pip's wheel cache, which keys
  a wheel built from an sdist by the sdist, not by ``CMAKE_ARGS`` (a CPU wheel without RPC
  already cached would silently be reused). ``build-seconds`` records the build's time.
- ``rpc-server-<version>-<tag>``: the static ``rpc-server`` binary.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "0.3.36"
LLAMA = f"llama-cpp-python=={VERSION}"
# What every llama.cpp build Hypnos installs gets: the RPC backend (workers as devices).
RPC_ARGS = ["-DGGML_RPC=ON"]
RPC_SERVER_ARGS = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_RPC=ON",
                   "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TOOLS=ON",
                   "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                   "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF"]


def cache_root(env=os.environ) -> Path:
    if env.get("HYPNOS_BUILD_CACHE"):
        return Path(env["HYPNOS_BUILD_CACHE"])
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hypnos"


def tag(args: list[str]) -> str:
    """A short key of CMake arguments: builds with other arguments never share a folder."""
    return hashlib.sha256(" ".join(args).encode()).hexdigest()[:12]


def wheel_dir(args: list[str], root: Path | None = None) -> Path:
    return (root or cache_root()) / "wheels" / f"llama_cpp_python-{VERSION}-{tag(args)}"


def rpc_server_path(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"rpc-server-{VERSION}-{tag(RPC_SERVER_ARGS)}"


def _run(cmd: list[str], **kw) -> None:
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kw)


def _sdist(pip: list[str], into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        _run(pip + ["download", "-q", "--no-deps", "--no-binary", ":all:", LLAMA, "-d",
                    str(into)])
        found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    return found[-1]


def build_wheel(python: str, args: list[str], root: Path | None = None) -> Path:
    """The cached wheel for ``args``, built first when missing. Blocks (minutes)."""
    out = wheel_dir(args, root)
    wheels = sorted(out.glob("llama_cpp_python-*.whl"))
    if wheels:
        return wheels[-1]
    pip = [python, "-m", "pip"]
    sdist = _sdist(pip, out / "sdist")
    env = dict(os.environ, CMAKE_ARGS=" ".join(args),
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 1))
    print(f"hypnos: compiling llama.cpp ({' '.join(args)}; about 11 minutes on 2 cores), "
          f"kept in {out}", file=sys.stderr)
    started = time.monotonic()
    _run(pip + ["wheel", "-q", "--no-deps", "--no-cache-dir", "-w", str(out), str(sdist)],
         env=env)
    (out / "build-seconds").write_text(f"{round(time.monotonic() - started)}\n")
    shutil.rmtree(out / "sdist", ignore_errors=True)
    return sorted(out.glob("llama_cpp_python-*.whl"))[-1]


def install_wheel(venv: Path, root: Path | None = None) -> None:
    """llama-cpp-python with the RPC backend into ``venv`` (CPU build), unless it has it."""
    python = str(venv / "bin" / "python")
    check = "import llama_cpp.llama_cpp as l, sys; sys.exit(0 if l.llama_supports_rpc() else 1)"
    if subprocess.run([python, "-c", check], capture_output=True).returncode == 0:
        return
    wheel = build_wheel(python, RPC_ARGS, root)
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)])


def rpc_server_binary(root: Path | None = None, python: str = sys.executable) -> Path:
    """llama.cpp's ``rpc-server``, built once per machine from the pinned sdist's llama.cpp.
    Blocks (minutes) the first time."""
    binary = rpc_server_path(root)
    if binary.is_file():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hypnos-rpc-src-") as tmp:
        work = Path(tmp)
        sdist = _sdist([python, "-m", "pip"], work)
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = work / "build"
        jobs = os.environ.get("HYPNOS_BUILD_JOBS", str(os.cpu_count() or 1))
        nice = ["nice", "-n", "10"]
        print(f"hypnos: building llama.cpp's rpc-server (minutes, once), kept as {binary}",
              file=sys.stderr)
        started = time.monotonic()
        _run(nice + ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
                     *RPC_SERVER_ARGS], stdout=subprocess.DEVNULL)
        _run(nice + ["cmake", "--build", str(build), "--target", "ggml-rpc-server", "-j", jobs],
             stdout=subprocess.DEVNULL)
        tmp_bin = binary.with_suffix(".tmp")
        shutil.copy2(build / "bin" / "ggml-rpc-server", tmp_bin)
        tmp_bin.rename(binary)
        binary.with_name(binary.name + ".build-seconds").write_text(
            f"{round(time.monotonic() - started)}\n")
    return binary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("wheel", "rpc-server"))
    ap.add_argument("--venv", type=Path, default=Path(".venv").resolve())
    args = ap.parse_args(argv)
    if args.action == "wheel":
        install_wheel(args.venv)
    else:
        print(rpc_server_binary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
