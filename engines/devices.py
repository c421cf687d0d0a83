"""What the installed engine builds can compute on: the backend each library was compiled
with, and whether its forward passes can run on a GPU in this process.

- llama-cpp-python: the backend from the ggml libraries in its package (``libggml-cuda``,
  ``libggml-metal``: compile-time, read without importing), and ``llama_supports_gpu_offload()``
  (true only when a GPU backend found a device).
- CTranslate2 (faster-whisper): ``get_cuda_device_count()``.
- onnxruntime: ``CUDAExecutionProvider`` among the compiled-in providers. That list names CUDA
  even with no GPU, so the engines report what a session really got
  (``session.get_providers()``) after load.
- docling-slim and GLiNER (CPU torch) always compute on the host; stable-diffusion.cpp is
  judged from its package's libraries only (not imported).

``probe_builds`` imports the libraries only when a GPU is present (never on a CPU-only host,
so ``hypnos serve`` starts as fast as before there). Each probe blocks for the library import
(well under a second each) and is cached for the process: builds do not change under a
running server.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

REINSTALL = "reinstall for the GPU with HYPNOS_GPU=cuda ./run.sh (docs/gpu.md)"


@dataclass(frozen=True)
class EngineBuild:
    """One engine kind's library as installed here."""
    library: str
    installed: bool
    backend: str            # compiled with (or, failing that, found): cuda | metal | cpu
    accelerated: bool       # its forward passes can run on a GPU in this process
    evidence: str           # what the probe saw, for people
    fix: str = ""           # how to get a build that can use the GPU ("" when none is needed)

    def to_wire(self) -> dict:
        return {"library": self.library, "installed": self.installed, "backend": self.backend,
                "accelerator": self.accelerated, "evidence": self.evidence,
                **({"fix": self.fix} if self.fix and not self.accelerated else {})}


def package_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def compiled_backend(package: Path | None) -> str:
    """The GPU backend a ggml-based package was compiled with, from its libraries: "cuda" when
    it ships a ``ggml-cuda`` library, "metal" for ``ggml-metal`` (or on Apple Silicon, where
    the default build has Metal), else "cpu"."""
    names = [p.name.lower() for p in package.rglob("*ggml-*")] if package else []
    if any("ggml-cuda" in n for n in names):
        return "cuda"
    if any("ggml-metal" in n for n in names) or _apple_silicon():
        return "metal"
    return "cpu"


@functools.cache
def llama_has_rpc() -> bool:
    """Whether llama-cpp-python was built with the RPC backend (GGML_RPC=ON: it ships a
    ``ggml-rpc`` library; ``llama_supports_rpc()`` without importing the bindings)."""
    package = package_dir("llama_cpp")
    return package is not None and any(package.rglob("*ggml-rpc*"))


@functools.cache
def llama_backend() -> str:
    """llama-cpp-python's compiled backend (``compiled_backend`` of its package), once."""
    return compiled_backend(package_dir("llama_cpp"))


def _apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def cuda_library_dirs() -> list[Path]:
    """The ``lib`` folders of the NVIDIA runtime packages in this environment
    (``site-packages/nvidia/*/lib``: cuBLAS, cuDNN, the CUDA 13 toolkit's ``cu13/lib``)."""
    nvidia = package_dir("nvidia")
    if nvidia is None:
        return []
    return sorted(p for p in nvidia.glob("*/lib") if p.is_dir())


@functools.cache
def preload_cuda_runtime() -> list[str]:
    """Load the CUDA 13 runtime libraries a CUDA build of llama.cpp links (``libcudart``,
    ``libcublasLt``, ``libcublas`` .so.13) from the pip-installed toolkit, RTLD_GLOBAL, so the
    import works without LD_LIBRARY_PATH (its RUNPATH is ``$ORIGIN`` only). Returns what was
    loaded; nothing when the packages are absent. Once per process."""
    loaded = []
    for folder in cuda_library_dirs():
        for stem in ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13"):
            path = folder / stem
            if path.exists():
                try:
                    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                    loaded.append(str(path))
                except OSError:
                    pass
    return loaded


@functools.cache
def llama_build(gpu_present: bool) -> EngineBuild:
    lib = "llama-cpp-python"
    package = package_dir("llama_cpp")
    if package is None:
        return EngineBuild(lib, False, "cpu", False, "not installed", "pip install 'hypnos[llama]'")
    backend = llama_backend()
    if not gpu_present:
        return EngineBuild(lib, True, backend, False, "no GPU on this host")
    if backend == "cuda":
        preload_cuda_runtime()
    try:
        from llama_cpp import llama_cpp as ll
        offload = bool(ll.llama_supports_gpu_offload())
    except (ImportError, OSError) as exc:
        return EngineBuild(lib, True, backend, False, f"import failed: {exc}",
                           "put the CUDA runtime's lib/ on LD_LIBRARY_PATH (run.sh does)")
    evidence = f"llama_supports_gpu_offload() is {offload}"
    # A CPU build with the RPC backend says True too (it can offload to RPC workers), so
    # the local GPU is used only when a GPU backend library was compiled in.
    if offload and backend != "cpu":
        return EngineBuild(lib, True, backend, True, evidence)
    fix = REINSTALL if backend == "cpu" else \
        "the GPU build finds no device: check nvidia-smi and CUDA_VISIBLE_DEVICES"
    return EngineBuild(lib, True, backend, False, f"{backend} build, {evidence}", fix)


@functools.cache
def ctranslate2_build(gpu_present: bool) -> EngineBuild:
    lib = "ctranslate2"
    if package_dir("ctranslate2") is None:
        return EngineBuild(lib, False, "cpu", False, "not installed", "pip install 'hypnos[stt]'")
    if not gpu_present:
        return EngineBuild(lib, True, "cpu", False, "no GPU on this host")
    try:
        import ctranslate2
        count = int(ctranslate2.get_cuda_device_count())
    except Exception as exc:  # noqa: BLE001 - a broken CUDA runtime means "no CUDA" here
        return EngineBuild(lib, True, "cpu", False, f"probe failed: {exc}", REINSTALL)
    evidence = f"get_cuda_device_count() is {count}"
    if count > 0:
        return EngineBuild(lib, True, "cuda", True, evidence)
    return EngineBuild(lib, True, "cpu", False, evidence,
                       "install the CUDA 12 cuBLAS and cuDNN 9 it loads: " + REINSTALL)


@functools.cache
def onnxruntime_build(gpu_present: bool) -> EngineBuild:
    lib = "onnxruntime"
    if package_dir("onnxruntime") is None:
        return EngineBuild(lib, False, "cpu", False, "not installed",
                           "pip install 'hypnos[embeddings]'")
    if not gpu_present:
        return EngineBuild(lib, True, "cpu", False, "no GPU on this host")
    try:
        import onnxruntime as ort
        providers = list(ort.get_available_providers())
    except Exception as exc:  # noqa: BLE001 - a broken install: no CUDA either
        return EngineBuild(lib, True, "cpu", False, f"import failed: {exc}", REINSTALL)
    if "CUDAExecutionProvider" in providers:
        return EngineBuild(lib, True, "cuda", True,
                           "CUDAExecutionProvider compiled in (each session reports its own)")
    return EngineBuild(lib, True, "cpu", False, f"providers {providers}",
                       REINSTALL + "; it swaps onnxruntime for onnxruntime-gpu (by hand: "
                       "pip uninstall -y onnxruntime && pip install onnxruntime-gpu)")


def _diffusion_build(gpu_present: bool) -> EngineBuild:
    lib = "stable-diffusion-cpp-python"
    package = package_dir("stable_diffusion_cpp")
    if package is None:
        return EngineBuild(lib, False, "cpu", False, "not installed",
                           "pip install 'hypnos[images]'")
    backend = compiled_backend(package)
    usable = gpu_present and backend != "cpu"
    return EngineBuild(lib, True, backend, usable, f"{backend} build (libraries, not probed)",
                       "" if usable else "rebuild stable-diffusion-cpp-python with -DSD_CUDA=ON")


def _host_only(library: str) -> EngineBuild:
    return EngineBuild(library, package_dir(library.replace("-slim", "")) is not None, "cpu",
                       False, "computes on the host by design")


_PROBES = {
    "ggml_llama": llama_build, "faster_whisper": ctranslate2_build,
    "onnx_runtime": onnxruntime_build, "ggml_diffusion": _diffusion_build,
    "docling": lambda gpu: _host_only("docling-slim"), "gliner": lambda gpu: _host_only("gliner"),
}


def probe_builds(engines, gpu_present: bool) -> dict[str, EngineBuild]:
    """Each engine kind in ``engines`` (unknown kinds are left out), probed for a host with a
    GPU (``gpu_present``) or without one (nothing is imported then). Blocks."""
    return {kind: _PROBES[kind](gpu_present) for kind in dict.fromkeys(engines)
            if kind in _PROBES}
