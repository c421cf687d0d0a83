"""What ./run.sh installs for this machine's GPU, and the CUDA steps it runs (stdlib only: it
runs with the system python3 before the venv exists, and with the venv's python after).

    gpu_install.py plan                   one line: "cpu", "metal" or "cuda sm<arch> <toolkit>"
    gpu_install.py dry-run --extras E     the detection and every command an install would run
    gpu_install.py build --venv V         CUDA: toolkit, llama-cpp-python wheel, install, check
    gpu_install.py runtime --venv V       CUDA: onnxruntime-gpu, cuBLAS/cuDNN, library path
    gpu_install.py revert --venv V        back to the CPU builds after HYPNOS_GPU=cpu

Detection: HYPNOS_GPU=cuda|cpu|auto (default auto). auto uses CUDA when ``nvidia-smi`` reports
a GPU and a toolkit can build for it: the system one (``nvcc`` on PATH, or $CUDA_HOME/bin),
else CUDA 13 from PyPI, which needs driver >= 580 and compute capability >= 7.5
(HYPNOS_CUDA_TOOLKIT=system|pypi|auto forces one). Apple
Silicon: llama.cpp's default build has Metal, nothing else is installed. The facts behind the
steps (22-minute build on 2 cores, the three toolkit fixes) are in ARCHITECTURE.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama_build import RPC_ARGS  # noqa: E402 (stdlib only, beside this file)
from llama_build import build_wheel as build_llama_wheel  # noqa: E402
from llama_build import wheel_dir as llama_wheel_dir  # noqa: E402

LLAMA = "llama-cpp-python==0.3.36"
PYPI_TOOLKIT = "cuda-toolkit[nvcc,nvvm,cudart,cublas,cccl,crt]==13.0.2"
PYPI_TOOLKIT_VERSION = "13.0"
MIN_DRIVER_CUDA13 = 580
MIN_CC_CUDA13 = (7, 5)
BUILD_TOOLS = ["cmake", "ninja", "scikit-build-core"]
# What CTranslate2 4.x (faster-whisper) and onnxruntime-gpu (CUDA 12 build) load at run time.
RUNTIME_LIBS = ["nvidia-cublas-cu12", "nvidia-cudnn-cu12>=9,<10", "nvidia-cuda-runtime-cu12",
                "nvidia-cufft-cu12", "nvidia-curand-cu12"]
ENV_FILE = "hypnos-gpu.env"          # in the venv: LD_LIBRARY_PATH for the server


@dataclass
class Plan:
    mode: str                            # cpu | metal | cuda
    reason: str
    gpu: str = ""
    arch: str = ""                       # compute capability without the dot: "90"
    driver: str = ""
    nvcc: str = ""                       # system nvcc; "" = the PyPI toolkit
    toolkit: str = ""                    # "system-12.4" | "pypi-13.0"
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return self.mode if self.mode != "cuda" else f"cuda sm{self.arch} {self.toolkit}"


class PlanError(Exception):
    """HYPNOS_GPU=cuda asked for what this machine cannot do (or a bad HYPNOS_GPU)."""


def query_gpu() -> tuple[str, str, str] | None:
    """(name, compute_cap, driver_version) of the first GPU ``nvidia-smi`` reports."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and re.fullmatch(r"\d+\.\d+", parts[1]):
            return parts[0], parts[1], parts[2]
    return None


def system_nvcc() -> tuple[str, str] | None:
    """(path, "12.4") of the system CUDA compiler: ``nvcc`` on PATH, else $CUDA_HOME/bin."""
    path = shutil.which("nvcc")
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if path is None and home and (Path(home) / "bin" / "nvcc").is_file():
        path = str(Path(home) / "bin" / "nvcc")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return (path, m.group(1)) if m else None


def detect(env=os.environ) -> Plan:
    """The plan for this machine. Raises PlanError when HYPNOS_GPU=cuda cannot be honoured."""
    want = (env.get("HYPNOS_GPU") or "auto").strip().lower()
    if want not in ("auto", "cuda", "cpu"):
        raise PlanError(f"HYPNOS_GPU must be cuda, cpu or auto, not {want!r}")
    if want == "cpu":
        return Plan("cpu", "HYPNOS_GPU=cpu")
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return Plan("metal", "Apple Silicon: llama.cpp's default build has Metal")
    gpu = query_gpu()
    if gpu is None:
        return _refuse(want, "nvidia-smi reports no NVIDIA GPU (no driver, or not on PATH)")
    name, cap, driver = gpu
    plan = Plan("cuda", "", gpu=name, arch=cap.replace(".", ""), driver=driver)
    toolkit = (env.get("HYPNOS_CUDA_TOOLKIT") or "auto").strip().lower()
    if toolkit not in ("auto", "system", "pypi"):
        raise PlanError(f"HYPNOS_CUDA_TOOLKIT must be system, pypi or auto, not {toolkit!r}")
    nvcc = system_nvcc() if toolkit != "pypi" else None
    if nvcc is None and toolkit == "system":
        raise PlanError("HYPNOS_CUDA_TOOLKIT=system, but no nvcc on PATH or in $CUDA_HOME/bin")
    if nvcc is not None:
        plan.nvcc, plan.toolkit = nvcc[0], f"system-{nvcc[1]}"
        plan.reason = f"{name} (compute {cap}, driver {driver}); system CUDA {nvcc[1]}"
        return plan
    major = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else 0
    cc = tuple(int(x) for x in cap.split("."))
    if major < MIN_DRIVER_CUDA13:
        return _refuse(want, f"{name}: driver {driver} is older than {MIN_DRIVER_CUDA13}, which "
                             "CUDA 13 from PyPI needs; install a CUDA toolkit that matches "
                             "the driver (nvcc on PATH or CUDA_HOME) or update the driver")
    if cc < MIN_CC_CUDA13:
        return _refuse(want, f"{name}: compute capability {cap} is below 7.5, which CUDA 13 "
                             "dropped; install an older CUDA toolkit (nvcc on PATH)")
    plan.toolkit = f"pypi-{PYPI_TOOLKIT_VERSION}"
    plan.reason = f"{name} (compute {cap}, driver {driver}); CUDA 13 toolkit from PyPI"
    return plan


def _refuse(want: str, why: str) -> Plan:
    if want == "cuda":
        raise PlanError(f"HYPNOS_GPU=cuda, but {why}")
    return Plan("cpu", why)


# ------------------------------------------------------------------ the commands

def wheel_dir(root: Path, plan: Plan) -> Path:
    """Where the CUDA wheel is kept: its own folder per arch and toolkit, never pip's wheel
    cache (which keys a wheel built from an sdist by the sdist, not by CMAKE_ARGS, so a CPU
    wheel would be reused silently). "-rpc": built with the RPC backend too."""
    tag = f"{LLAMA.replace('==', '-')}-sm{plan.arch}-{plan.toolkit}-rpc"
    return root / ".cache" / "gpu-wheels" / tag


def cmake_args(plan: Plan, toolkit_root: str) -> str:
    """CUDA for the card's architecture, and the RPC backend every Hypnos build has
    (``llama_build.RPC_ARGS``: RPC workers as devices)."""
    nvcc = plan.nvcc or f"{toolkit_root}/bin/nvcc"
    args = ["-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={plan.arch}",
            f"-DCMAKE_CUDA_COMPILER={nvcc}", *RPC_ARGS]
    if not plan.nvcc:
        args.append(f"-DCUDAToolkit_ROOT={toolkit_root}")
    return " ".join(args)


def pypi_toolkit_root(venv: Path) -> Path:
    return site_packages(venv) / "nvidia" / "cu13"


def site_packages(venv: Path) -> Path:
    lib = venv / "lib"
    found = sorted(lib.glob("python3*/site-packages")) if lib.is_dir() else []
    if found:
        return found[0]
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return lib / py / "site-packages"


def build_commands(plan: Plan, venv: Path, root: Path) -> list[str]:
    """The CUDA build, as shell commands for people (dry-run) in the order ``build`` runs."""
    pip = f"{venv}/bin/pip"
    out = wheel_dir(root, plan)
    tk = str(pypi_toolkit_root(venv)) if not plan.nvcc else str(Path(plan.nvcc).parent.parent)
    cmds = []
    if plan.nvcc:
        cmds.append(f"{pip} install -q {' '.join(BUILD_TOOLS)}")
    else:
        cmds.append(f"{pip} install -q \"{PYPI_TOOLKIT}\" {' '.join(BUILD_TOOLS)}")
        cmds.append(f"ln -sfn lib {tk}/lib64   # nvcc.profile links from lib64")
        cmds.append(f"ln -sf libcudart.so.13 / libcublas.so.13 / libcublasLt.so.13 as "
                    f"unversioned .so in {tk}/lib")
        cmds.append(f"generate a libcuda.so stub from {tk}/include/cuda.h into "
                    f"{tk}/lib64/stubs (link time only; the driver's libcuda.so.1 at run time)")
    cmds.append(f"[ -f {out}/*.whl ] || {{ {pip} download --no-deps --no-build-isolation "
                f"--no-binary llama-cpp-python {LLAMA} -d {out}/sdist && "
                f"CMAKE_ARGS=\"{cmake_args(plan, tk)}\" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "
                f"{pip} wheel --no-deps --no-cache-dir --no-build-isolation -w {out} "
                f"{out}/sdist/llama_cpp_python-*.tar.gz; }}   # timed, into {out}/build-seconds")
    cmds.append(f"{pip} install --no-deps --force-reinstall {out}/llama_cpp_python-*.whl")
    cmds.append("check: llama_cpp.llama_supports_gpu_offload() is True (else the install fails)")
    return cmds


def runtime_commands(venv: Path) -> list[str]:
    pip = f"{venv}/bin/pip"
    return [f"{pip} uninstall -y onnxruntime onnxruntime-gpu   # the two overwrite each other: "
            "gpu installed whole, after",
            f"{pip} install -q onnxruntime-gpu {' '.join(shlex.quote(p) for p in RUNTIME_LIBS)}",
            f"write {venv}/{ENV_FILE}: LD_LIBRARY_PATH = site-packages/nvidia/*/lib "
            "(run.sh sources it before starting hypnos)"]


def base_commands(venv: Path, extras: str, cpu_llama: bool = True) -> list[str]:
    """What run.sh installs on every host; ``cpu_llama``: llama-cpp-python's CPU build with
    the RPC backend (``llama_build.py``), kept once per machine outside the clone."""
    pip = f"{venv}/bin/pip"
    cmds = [f"python3 -m venv {venv}", f"{pip} install -q --upgrade pip setuptools wheel"]
    if re.search(r"(^|,)(ner|all)(,|$)", extras):
        cmds.append(f"{pip} install -q torch==2.13.0")
    if cpu_llama and re.search(r"(^|,)(llama|all)(,|$)", extras):
        cmds.append(f"{venv}/bin/python cli/llama_build.py wheel --venv {venv}   # "
                    f"{' '.join(RPC_ARGS)}, built once into {llama_wheel_dir(RPC_ARGS)}")
    cmds.append(f"{pip} install -q -e \".[{extras},test]\"")
    return cmds


def dry_run(plan: Plan, venv: Path, root: Path, extras: str) -> str:
    lines = [f"hypnos: GPU: {plan.line()} ({plan.reason})"]
    if plan.mode == "metal":
        lines.append("hypnos: llama-cpp-python's default build (Metal); no other GPU packages")
    cmds = base_commands(venv, extras, cpu_llama=plan.mode != "cuda")
    if plan.mode == "cuda":
        cmds = cmds[:-1] + build_commands(plan, venv, root) + cmds[-1:] + runtime_commands(venv)
    lines += [f"would run: {c}" for c in cmds]
    return "\n".join(lines)


# ------------------------------------------------------------------ the CUDA steps

def run(cmd: list[str], **kw) -> None:
    print("hypnos: $", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, **kw)


CUDA_DECL = re.compile(r"^\s*(?:extern\s+)?CUresult\s+CUDAAPI\s+(cu\w+)\s*\(", re.M)
CUDA_DEFINE = re.compile(r"^\s*#\s*define\s+(cu\w+)\s+(cu\w+)\s*$", re.M)


def stub_source(cuda_h: str) -> str:
    """C source of a libcuda stub: one symbol per driver function ``cuda.h`` declares, under
    both its plain and its versioned name (``#define cuMemAlloc cuMemAlloc_v2``). Only the
    linker reads it: the real driver's libcuda.so.1 is what runs."""
    names = set(CUDA_DECL.findall(cuda_h))
    names |= {v for k, v in CUDA_DEFINE.findall(cuda_h)}
    return "".join(f"int {n}(void) {{ return 999; }}\n" for n in sorted(names))


def make_stub(toolkit: Path) -> Path:
    stubs = toolkit / "lib64" / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    src = stubs / "cuda_stub.c"
    src.write_text(stub_source((toolkit / "include" / "cuda.h").read_text(errors="replace")))
    out = stubs / "libcuda.so"
    run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)])
    return out


def fix_pypi_toolkit(toolkit: Path) -> None:
    """The three fixes that make PyPI's CUDA 13 root a toolkit CMake and nvcc accept."""
    lib64 = toolkit / "lib64"
    if not lib64.exists():
        lib64.symlink_to("lib")
    for name in ("libcudart.so", "libcublas.so", "libcublasLt.so"):
        link = toolkit / "lib" / name
        versioned = sorted((toolkit / "lib").glob(name + ".13*"))
        if not link.exists() and versioned:
            link.symlink_to(versioned[0].name)
    if not (lib64 / "stubs" / "libcuda.so").exists():
        make_stub(toolkit)


def lib_dirs(venv: Path) -> list[str]:
    nvidia = site_packages(venv) / "nvidia"
    return sorted(str(p) for p in nvidia.glob("*/lib") if p.is_dir()) if nvidia.is_dir() else []


def check_offload(venv: Path) -> bool:
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(lib_dirs(venv) + [
        os.environ.get("LD_LIBRARY_PATH", "")]).strip(":"))
    code = "import llama_cpp; print(bool(llama_cpp.llama_supports_gpu_offload()))"
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                          text=True, env=env)
    ok = proc.stdout.strip().endswith("True")
    print(f"hypnos: llama_supports_gpu_offload() -> {proc.stdout.strip() or proc.stderr[-400:]}",
          file=sys.stderr)
    return ok


def build(plan: Plan, venv: Path, root: Path) -> None:
    pip = str(venv / "bin" / "pip")
    if plan.nvcc:
        run([pip, "install", "-q", *BUILD_TOOLS])
        toolkit = Path(plan.nvcc).resolve().parent.parent
    else:
        run([pip, "install", "-q", PYPI_TOOLKIT, *BUILD_TOOLS])
        toolkit = pypi_toolkit_root(venv)
        fix_pypi_toolkit(toolkit)
    out = wheel_dir(root, plan)
    wheels = sorted(out.glob("llama_cpp_python-*.whl"))
    if not wheels:
        sdist = out / "sdist"
        run([pip, "download", "-q", "--no-deps", "--no-build-isolation", "--no-binary",
             "llama-cpp-python", LLAMA, "-d", str(sdist)])
        env = dict(os.environ, CMAKE_ARGS=cmake_args(plan, str(toolkit)),
                   CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 1))
        print(f"hypnos: compiling llama.cpp with CUDA for sm_{plan.arch} (about 22 minutes on "
              "2 cores, 3-4 on 16)", file=sys.stderr)
        started = time.monotonic()
        run([pip, "wheel", "-q", "--no-deps", "--no-cache-dir", "--no-build-isolation", "-w",
             str(out), str(next(sdist.glob("llama_cpp_python-*.tar.gz")))], env=env)
        seconds = round(time.monotonic() - started)
        (out / "build-seconds").write_text(f"{seconds}\n")
        print(f"hypnos: the CUDA build took {seconds} s", file=sys.stderr)
        wheels = sorted(out.glob("llama_cpp_python-*.whl"))
    run([pip, "install", "-q", "--no-deps", "--force-reinstall", str(wheels[-1])])
    if not check_offload(venv):
        if not Path("/dev/nvidiactl").exists():
            raise SystemExit("hypnos: llama-cpp-python was compiled with CUDA, but this host "
                             "has no NVIDIA driver (no /dev/nvidiactl, no libcuda.so.1) to "
                             "load it; nvidia-smi reported a GPU that is not here")
        raise SystemExit("hypnos: the CUDA build of llama-cpp-python cannot offload to the GPU "
                         "(llama_supports_gpu_offload() is False); check nvidia-smi, or use "
                         "HYPNOS_GPU=cpu")


def runtime(venv: Path) -> None:
    pip = str(venv / "bin" / "pip")
    # Both go first: a reinstall (a new extra, a changed pyproject) has put onnxruntime back
    # over onnxruntime-gpu's files, and removing it alone would leave onnxruntime-gpu
    # "installed" with those files gone.
    subprocess.run([pip, "uninstall", "-y", "-q", "onnxruntime", "onnxruntime-gpu"],
                   check=False)
    run([pip, "install", "-q", "onnxruntime-gpu", *RUNTIME_LIBS])
    (venv / ENV_FILE).write_text("export LD_LIBRARY_PATH=\"" + ":".join(lib_dirs(venv))
                                 + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\"\n")


def revert(venv: Path) -> None:
    """Undo a CUDA install (HYPNOS_GPU=cpu after cuda): the CPU llama.cpp with RPC from the
    machine's build cache (``llama_build.py``), onnxruntime back in place of onnxruntime-gpu."""
    env_file = venv / ENV_FILE
    if not env_file.exists():
        return
    pip = str(venv / "bin" / "pip")
    wheel = build_llama_wheel(str(venv / "bin" / "python"), RPC_ARGS)
    run([pip, "install", "-q", "--no-deps", "--force-reinstall", str(wheel)])
    subprocess.run([pip, "uninstall", "-y", "-q", "onnxruntime-gpu"], check=False)
    run([pip, "install", "-q", "--force-reinstall", "onnxruntime>=1.18"])
    env_file.unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("plan", "dry-run", "build", "runtime", "revert"))
    ap.add_argument("--venv", type=Path, default=Path(".venv").resolve())
    ap.add_argument("--extras", default="llama,stt,tts,embeddings,docs")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    if args.action == "revert":
        revert(args.venv)
        return 0
    try:
        plan = detect()
    except PlanError as exc:
        print(f"hypnos: {exc}", file=sys.stderr)
        return 2
    if args.action == "plan":
        print(plan.line())
        quiet = plan.reason == "HYPNOS_GPU=cpu" or "no NVIDIA" in plan.reason
        if plan.mode == "cpu" and not quiet:
            print(f"hypnos: installing for the CPU: {plan.reason}", file=sys.stderr)
    elif args.action == "dry-run":
        print(dry_run(plan, args.venv, root, args.extras))
    elif plan.mode == "cuda" and args.action == "build":
        build(plan, args.venv, root)
    elif plan.mode == "cuda" and args.action == "runtime":
        runtime(args.venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
