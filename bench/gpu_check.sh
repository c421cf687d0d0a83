#!/usr/bin/env bash
# The GPU check in one call (issue 27), on a lent NVIDIA machine without network:
#
#   bash bench/gpu_check.sh            # the device: run(command=..., carry=[".devkit"])
#   bash bench/gpu_check.sh --dry-run  # any CPU machine: builds nothing, prints each step,
#                                      # writes a 10 MiB synthetic GGUF, loads it on the CPU
#
# Needs .devkit/ (python bench/device_kit.py). Steps: the kit's wheels into a venv that sees
# the image's packages (--no-index); llama.cpp built with CUDA for $CUDA_ARCH (shared
# libraries + llama-server, one build tree, every core), timed; the pure-Python llama_cpp
# package over those libraries; synthetic llama GGUFs (3 x ~1 GiB, ~8 GiB) on the local disk;
# bench/gpu_check.py, which writes gpu_check.json and gpu_check.txt to $OUT. Each step's
# exit status and seconds go to $OUT/steps.tsv; a failed step does not stop the later ones.
# Work files go to $GPU_CHECK_WORK (default /tmp/hypnos-gpu). Exit status: gpu_check.py's.
# A rehearsal on a CPU machine (the whole path, a CPU build): GPU_CHECK_CUDA=OFF,
# GPU_CHECK_SIZES="16 64" (MiB of the three small models and the large one), PYTHON=a venv
# that has Hypnos's packages, GPU_CHECK_PLUMBING=1 (bench/gpu_checks_engine.py).
set -u -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIT=${KIT:-$ROOT/.devkit}
WORK=${GPU_CHECK_WORK:-/tmp/hypnos-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
BUDGET_S=${GPU_CHECK_BUDGET_S:-530}          # the whole call must end before 9 minutes
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
: > "$OUT/steps.tsv"
exec > >(tee "$OUT/gpu_check.log") 2>&1     # all of it comes back, not only the output's tail
START=$(date +%s)
DEADLINE=$((START + BUDGET_S))

say() { echo "== [+$(( $(date +%s) - START ))s] $*"; }
# step NAME CMD...: runs CMD (with --dry-run only prints it: rc "dry"); logs "NAME rc seconds".
step() {
  local name=$1; shift
  say "$name: $*"
  local t0=$(date +%s) rc=0
  if [ $DRY = 1 ]; then echo "   (dry run: not run)"; rc=dry; else "$@" || rc=$?; fi
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$OUT/steps.tsv"
  [ $rc = 0 ] || [ $rc = dry ] || say "$name FAILED (exit $rc); going on"
  return 0
}
# always NAME CMD...: like step, but runs in a dry run too.
always() {
  local name=$1; shift
  say "$name: $*"
  local t0=$(date +%s) rc=0
  "$@" || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$OUT/steps.tsv"
  [ $rc = 0 ] || say "$name FAILED (exit $rc); going on"
  return 0
}

CUDA=${GPU_CHECK_CUDA:-ON}
read -r SMALL_MIB LARGE_MIB <<< "${GPU_CHECK_SIZES:-1024 8192}"
if [ $DRY = 1 ]; then
  PY=${PYTHON:-$ROOT/.venv/bin/python}
  [ -x "$PY" ] || PY=python3
else
  PY=${PYTHON:-$WORK/venv/bin/python}
fi
SITE=$WORK/site                     # hypnos (links to the tree) and llama_cpp, on PYTHONPATH
SRC=$WORK/src
BUILD=$WORK/build
MODELS=$WORK/models
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

preflight() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  nvcc --version | tail -2 || true
  python3 --version; nproc; free -g | head -2; df -h "$WORK" | tail -1
  if [ -f "$KIT/manifest.json" ]; then cat "$KIT/manifest.json"; return 0; fi
  echo "no kit at $KIT: run python bench/device_kit.py"
  [ $DRY = 1 ]                        # a dry run uses none of it
}

# A venv over the image's packages lets pip's resolver check the kit against them; when the
# image's python3 is itself a venv (a venv made from it would not see its packages) or has no
# venv module, the wheels go into $SITE without dependencies instead.
wheels() {
  local nested
  nested=$(python3 -c 'import sys; print(int(sys.prefix != sys.base_prefix))')
  if [ ! -x "$PY" ] && { [ "$nested" = 1 ] ||
      ! python3 -m venv --system-site-packages "$WORK/venv"; }; then
    echo "the wheels go into $SITE for the image's python3 (nested venv: $nested)"
    PY=python3
    python3 -m pip install -q --no-index --no-deps --target "$SITE" "$KIT"/wheels/*.whl
    return
  fi
  "$PY" -m pip install -q --no-index --find-links "$KIT/wheels" sanic sanic-testing pydantic \
      tomlkit gguf diskcache ||
  { echo "resolver refused; installing the kit's wheels without dependencies";
    "$PY" -m pip install -q --no-index --no-deps "$KIT"/wheels/*.whl; }
}

# hypnos's packages as links under $SITE/hypnos (pyproject's package-dir), so the tree itself
# is what runs: python -m hypnos.cli works with PYTHONPATH alone.
link_hypnos() {
  mkdir -p "$SITE/hypnos" && "$PY" - "$ROOT" "$SITE/hypnos" <<'EOF'
import sys, tomllib
from pathlib import Path
root, dest = Path(sys.argv[1]), Path(sys.argv[2])
dirs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
for name, folder in dirs.items():
    link = dest / name.split(".", 1)[1]
    if not link.is_symlink():
        link.symlink_to(root / folder)
print("linked", ", ".join(sorted(dirs)))
EOF
}

cmake_flags() {
  local flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON
    "-DGGML_CUDA=$CUDA" "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH" -DGGML_RPC=ON
    "-DGGML_CUDA_FA=${GGML_CUDA_FA:-ON}"
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
  # No cuBLAS in the toolkit: use PyTorch's pip copy (nvidia/cublas) when the image has one.
  local inc
  inc=$(dirname "$(find /usr/local/cuda*/ -name cublas_v2.h 2>/dev/null | head -1)" 2>/dev/null)
  if [ -z "$inc" ] || [ "$inc" = "." ]; then
    local pip_cublas
    pip_cublas=$(python3 -c 'import nvidia.cublas, os; print(list(nvidia.cublas.__path__)[0])' 2>/dev/null)
    if [ -n "$pip_cublas" ]; then
      local lib=$pip_cublas/lib
      flags+=("-DCMAKE_CUDA_FLAGS=-I$pip_cublas/include" "-DCMAKE_CXX_FLAGS=-I$pip_cublas/include"
        "-DCUDA_cublas_LIBRARY=$(ls "$lib"/libcublas.so* | head -1)"
        "-DCUDA_cublasLt_LIBRARY=$(ls "$lib"/libcublasLt.so* | head -1)")
    fi
  fi
  printf '%s\n' "${flags[@]}"
}

TARGETS=(llama ggml ggml-base ggml-cpu ggml-rpc mtmd llama-server)
[ "$CUDA" = ON ] && TARGETS+=(ggml-cuda)
build_plan() {
  echo "cmake -S $SRC/vendor/llama.cpp -B $BUILD $(cmake_flags | tr '\n' ' ')"
  echo "cmake --build $BUILD -j $(nproc) --target ${TARGETS[*]}"
}

# A rerun on a warm machine reuses the source and the build (no re-extraction: new mtimes
# would rebuild everything): a build that finished left $BUILD/.hypnos-built.
build_llama() {
  if [ -f "$BUILD/.hypnos-built" ] && [ -x "$BUILD/bin/llama-server" ]; then
    echo "built before ($(cat "$BUILD/.hypnos-built")): reused"
    return 0
  fi
  if [ ! -d "$SRC/vendor" ]; then
    mkdir -p "$SRC" && tar xzf "$KIT"/llama-cpp-python-*-trimmed.tar.gz -C "$SRC" --strip-components=1 ||
      return 1
  fi

  mapfile -t flags < <(cmake_flags)
  cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" "${flags[@]}" > "$OUT/cmake-configure.log" 2>&1 ||
    { tail -20 "$OUT/cmake-configure.log"; return 1; }
  # Stopped 60 s before the deadline, so the table still gets written (a rerun resumes it).
  local left=$((DEADLINE - $(date +%s) - 60))
  [ "$left" -gt 0 ] || left=1
  timeout "$left" cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" \
    > "$OUT/cmake-build.log" 2>&1
  local rc=$?
  tail -5 "$OUT/cmake-configure.log" "$OUT/cmake-build.log" 2>/dev/null
  [ $rc = 0 ] && date -u +%FT%TZ > "$BUILD/.hypnos-built"
  return $rc
}

# The pure-Python llama_cpp over the build's libraries (its loader looks in llama_cpp/lib;
# Hypnos reads the backend from the libraries found there).
install_llama_cpp() {
  rm -rf "$SITE/llama_cpp" && cp -r "$SRC/llama_cpp" "$SITE/llama_cpp" &&
  mkdir -p "$SITE/llama_cpp/lib" && cp -a "$BUILD"/bin/*.so* "$SITE/llama_cpp/lib/" &&
  ls "$SITE/llama_cpp/lib" &&
  "$PY" -c 'import llama_cpp.llama_cpp as l; print("gpu offload:", l.llama_supports_gpu_offload())'
}

# gguf NAME MIB SEED: bench/synthetic_gguf.py, unless a rerun finds the file already there.
gguf() {
  [ -s "$MODELS/$1" ] && { echo "$1 already written"; return 0; }
  "$PY" "$ROOT/bench/synthetic_gguf.py" "$MODELS/$1.tmp" --size-mib "$2" --seed "$3" &&
    mv "$MODELS/$1.tmp" "$MODELS/$1"
}

write_models() {
  mkdir -p "$MODELS"
  if [ $DRY = 1 ]; then gguf syn-10m.gguf 10 0; return; fi
  gguf syn-1g-1.gguf "$SMALL_MIB" 1 && gguf syn-1g-2.gguf "$SMALL_MIB" 2 &&
    gguf syn-1g-3.gguf "$SMALL_MIB" 3 && gguf syn-8g.gguf "$LARGE_MIB" 8
}

say "gpu_check.sh: root $ROOT, kit $KIT, work $WORK, out $OUT, dry run $DRY, budget ${BUDGET_S}s"
always preflight preflight
step wheels wheels
always link_hypnos link_hypnos
# The models are written (one core, the disk) while llama.cpp builds (every core).
say "write_models, in the background (log: $OUT/write_models.log)"
write_models > "$OUT/write_models.log" 2>&1 &
MODELS_PID=$!
always build_plan build_plan
step build_llama build_llama
step install_llama_cpp install_llama_cpp
say "waiting for the models"
always write_models wait $MODELS_PID
cat "$OUT/write_models.log"

if [ $DRY = 1 ]; then
  set -- --cpu-smoke --model "$MODELS/syn-10m.gguf"
else
  set -- --models "$MODELS"/syn-1g-1.gguf "$MODELS"/syn-1g-2.gguf "$MODELS"/syn-1g-3.gguf \
    --large "$MODELS/syn-8g.gguf" --llama-server "$BUILD/bin/llama-server"
fi
say "checks: bench/gpu_check.py $*"
rc=0
"$PY" "$ROOT/bench/gpu_check.py" "$@" --steps "$OUT/steps.tsv" --out "$OUT" \
  --deadline "$DEADLINE" || rc=$?
say "done, exit $rc; results in $OUT (gpu_check.json, gpu_check.txt)"
exit $rc
