"""run.sh's GPU detection (cli/gpu_install.py) with a fake ``nvidia-smi`` (and ``nvcc``) on
PATH, through ``HYPNOS_DRY_RUN=1 ./run.sh``: it prints what it would install and installs
nothing. Pure and fast; no real toolkit, compiler or GPU is used."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "cli"))
import gpu_install  # noqa: E402

# The default extras (./run.sh serve): no GLiNER, so no torch; `./run.sh test` adds "ner"
# (tests/unit/test_run_sh.py).
CPU_INSTALL = ['pip install -q --upgrade pip setuptools wheel',
               'python cli/llama_build.py wheel --venv ' + str(ROOT / ".venv"),
               'pip install -q -e ".[llama,stt,tts,embeddings,docs,test]"']


def _bin(tmp_path, smi: str | None = None, nvcc: str | None = None):
    """A PATH folder with python3, and a fake nvidia-smi / nvcc printing what is given."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True)
    (folder / "python3").symlink_to(sys.executable)
    for name, out in (("nvidia-smi", smi), ("nvcc", nvcc)):
        if out is not None:
            (folder / name).write_text(f"#!/bin/sh\ncat <<'EOF'\n{out}\nEOF\n")
            (folder / name).chmod(0o755)
    return folder


def dry_run(tmp_path, smi=None, nvcc=None, **env):
    folder = _bin(tmp_path, smi, nvcc)
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    full.update(PATH=f"{folder}:/usr/bin:/bin", HYPNOS_DRY_RUN="1", **env)
    if "HYPNOS_GPU" not in env:
        full.pop("HYPNOS_GPU", None)
    return subprocess.run([str(ROOT / "run.sh")], capture_output=True, text=True, env=full,
                          timeout=60)


H200 = "NVIDIA H200, 9.0, 580.95.05"
NVCC = "Cuda compilation tools, release 12.4, V12.4.131"


def test_an_h200_without_nvcc_builds_with_pypi_cuda_13(tmp_path):
    r = dry_run(tmp_path, smi=H200)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("hypnos: GPU: cuda sm90 pypi-13.0")
    assert '"cuda-toolkit[nvcc,nvvm,cudart,cublas,cccl,crt]==13.0.2"' in out
    assert "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" in out
    assert "-DGGML_RPC=ON" in out and "sm90-pypi-13.0-rpc" in out     # RPC workers as devices
    assert "llama_build.py wheel" not in out          # the CUDA build replaces the CPU one
    assert "nvidia/cu13/bin/nvcc" in out and "-DCUDAToolkit_ROOT=" in out
    assert "lib64" in out and "libcuda.so stub" in out       # the three documented fixes
    # Kept out of pip's wheel cache, which keys by sdist and would hand back a CPU wheel.
    assert "--no-cache-dir" in out and ".cache/gpu-wheels/llama-cpp-python-0.3.36-sm90" in out
    assert "llama_supports_gpu_offload() is True" in out
    assert "uninstall -y onnxruntime" in out and "install -q onnxruntime-gpu" in out
    assert "nvidia-cudnn-cu12" in out and "nvidia-cublas-cu12" in out and "LD_LIBRARY_PATH" in out
    # The CUDA wheel is built before the extras are installed (so they find it satisfied).
    assert out.index("pip wheel") < out.index('install -q -e ".[')
    assert "installing into .venv" not in r.stderr           # nothing was installed


def test_a_system_nvcc_is_used_first(tmp_path):
    r = dry_run(tmp_path, smi="NVIDIA GeForce RTX 4090, 8.9, 550.54.14", nvcc=NVCC)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("hypnos: GPU: cuda sm89 system-12.4")
    assert f"-DCMAKE_CUDA_COMPILER={tmp_path}/bin/nvcc" in r.stdout
    assert "cuda-toolkit[" not in r.stdout and "CUDAToolkit_ROOT" not in r.stdout


@pytest.mark.parametrize("smi,why", [
    ("NVIDIA GeForce RTX 3090, 8.6, 550.54.14", "driver 550.54.14 is older than 580"),
    ("Tesla P100-PCIE-16GB, 6.0, 580.95.05", "compute capability 6.0 is below 7.5"),
    (None, "nvidia-smi reports no NVIDIA GPU"),
])
def test_auto_falls_back_to_the_cpu_install_and_cuda_refuses(tmp_path, smi, why):
    r = dry_run(tmp_path / "auto", smi=smi)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("hypnos: GPU: cpu (") and why in r.stdout.splitlines()[0]
    assert why in r.stdout and "GGML_CUDA" not in r.stdout and "onnxruntime-gpu" not in r.stdout
    forced = dry_run(tmp_path / "cuda", smi=smi, HYPNOS_GPU="cuda")
    assert forced.returncode != 0 and "HYPNOS_GPU=cuda, but" in forced.stderr
    assert why in forced.stderr


def test_cpu_hosts_and_hypnos_gpu_cpu_install_what_they_did_before(tmp_path):
    for case, kw in (("none", {}), ("forced", {"smi": H200, "HYPNOS_GPU": "cpu"})):
        r = dry_run(tmp_path / case, **kw)
        assert r.returncode == 0, r.stderr
        cmds = [line.split("/.venv/bin/", 1)[-1].split("   #")[0]
                for line in r.stdout.splitlines() if line.startswith("would run:")]
        assert cmds[0].endswith("python3 -m venv " + str(ROOT / ".venv"))
        assert cmds[1:] == CPU_INSTALL


def test_a_bad_hypnos_gpu_is_refused(tmp_path):
    r = dry_run(tmp_path, HYPNOS_GPU="rocm")
    assert r.returncode != 0 and "HYPNOS_GPU must be cuda, cpu or auto" in r.stderr


def test_the_libcuda_stub_covers_plain_and_versioned_driver_names(tmp_path):
    cuda_h = """
#define cuMemAlloc cuMemAlloc_v2
#define cuCtxCreate cuCtxCreate_v4
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
extern CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size);
"""
    src = gpu_install.stub_source(cuda_h)
    names = {line.split()[1].split("(")[0] for line in src.splitlines()}
    assert names == {"cuInit", "cuMemAlloc", "cuMemAlloc_v2", "cuCtxCreate_v4", "cuMemCreate"}
    if shutil.which("cc") is None or shutil.which("readelf") is None:
        pytest.skip("no C compiler here to link the stub")
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda.h").write_text(cuda_h)
    lib = gpu_install.make_stub(tmp_path)
    dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "libcuda.so.1" in dyn      # links as the driver's soname; the driver runs
    assert lib.parent == tmp_path / "lib64" / "stubs"


def test_hypnos_cuda_toolkit_forces_pypi_or_system(tmp_path):
    r = dry_run(tmp_path / "pypi", smi=H200, nvcc=NVCC, HYPNOS_CUDA_TOOLKIT="pypi")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("hypnos: GPU: cuda sm90 pypi-13.0")
    assert "cuda-toolkit[" in r.stdout and f"{tmp_path}/pypi/bin/nvcc" not in r.stdout
    missing = dry_run(tmp_path / "system", smi=H200, HYPNOS_CUDA_TOOLKIT="system")
    assert missing.returncode != 0 and "HYPNOS_CUDA_TOOLKIT=system, but no nvcc" in missing.stderr
    bad = dry_run(tmp_path / "bad", smi=H200, HYPNOS_CUDA_TOOLKIT="conda")
    assert bad.returncode != 0 and "HYPNOS_CUDA_TOOLKIT must be" in bad.stderr
