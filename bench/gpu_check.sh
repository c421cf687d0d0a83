#!/usr/bin/env bash
# The GPU check in two steps (issues 27 and 40), on a lent NVIDIA machine without network:
#
#   bash bench/gpu_check.sh --build [--fa]   # 1: build llama.cpp, install, write the models
#   bash bench/gpu_check.sh                  # 2: the checks on that build (refused without it)
#   ... --dry-run                            # either step on any CPU machine: builds nothing
#
# On the device: run(command="bash bench/gpu_check.sh --build", carry=[".devkit"]), then
# run(command="bash bench/gpu_check.sh", carry=[".devkit"]) while the machine is still warm.
# Each step ends within GPU_CHECK_BUDGET_S (530 s: under the 9-minute call) and writes its
# records whatever happens; a step that runs out of time says so in them, and a rerun resumes.
#
# --build: the kit's wheels (.devkit/, python bench/device_kit.py) into a venv over the image's
# packages; llama.cpp built with CUDA for $CUDA_ARCH (shared libraries + llama-server, one
# build tree, every core; flash-attention kernels off unless --fa: they are most of the CUDA
# compile), timed; the pure-Python llama_cpp over those libraries; synthetic llama GGUFs
# (3 x ~1 GiB, ~8 GiB), written while it builds. Records: $OUT/build.json (and
# $WORK/build.json, which step 2 reads): the build's seconds and exit, CUDA version, where
# cuBLAS came from, flash attention on/off, the GPU's name and memory, cores. Without nvcc (or
# with GPU_CHECK_CUDA=OFF) it builds for the CPU and records why.
# Checks (no flag): bench/gpu_check.py, each check in its own process, the swap workload
# first; $OUT/gpu_check.json and gpu_check.txt are rewritten after every check.
# Every step's exit status and seconds go to $OUT/steps.tsv; a failed step does not stop the
# later ones. Work files: $GPU_CHECK_WORK (default /tmp/hypnos-gpu); a dry run works in its
# own fresh $GPU_CHECK_WORK/dry-run, never reading what a real run left.
# Exit status: 0 all passed; 1 a step or check failed; 2 usage; 3 no build for the checks.
# A rehearsal on a CPU machine (the whole path, a CPU build): GPU_CHECK_CUDA=OFF
# GPU_CHECK_SIZES="16 64" (MiB of the three small models and the large one), PYTHON=a venv
# that has Hypnos's packages (the kit's wheels are then not installed), GPU_CHECK_BUDGET_S=1500
# for a 2-core build; for the checks GPU_CHECK_PLUMBING=1 (bench/gpu_checks_engine.py) and
# GPU_CHECK_BUDGET_S=900. GPU_CHECK_ONLY=8,1,5 runs those checks alone, in that order.
set -u -o pipefail
# The fault handler: a check's process or server that dies on a signal prints its stack.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONFAULTHANDLER=1

usage() {
  echo "usage: bash bench/gpu_check.sh [--build [--fa]] [--dry-run]" >&2
  echo "  --build    build llama.cpp, install it, write the models (step 1)" >&2
  echo "  (no flag)  run the checks on that build (step 2)" >&2
  echo "  --fa       with --build: compile the CUDA flash-attention kernels too" >&2
  echo "  --dry-run  build nothing; print each step; the CPU smoke check" >&2
}
DRY=0 MODE=checks FA=OFF
for arg in "$@"; do
  case "$arg" in
    --build) MODE=build ;;
    --fa) FA=ON ;;
    --dry-run) DRY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown option '$arg'" >&2; usage; exit 2 ;;
  esac
done
if [ $FA = ON ] && [ $MODE != build ]; then
  echo "gpu_check.sh: --fa goes with --build" >&2; usage; exit 2
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIT=${KIT:-$ROOT/.devkit}
BASE=${GPU_CHECK_WORK:-/tmp/hypnos-gpu}
if [ $DRY = 1 ]; then
  # A real run leaves llama_cpp (its libraries possibly missing) in $BASE/site, which would
  # shadow the venv's on PYTHONPATH ("Shared library with base name 'llama' not found").
  WORK=$BASE/dry-run
  rm -rf "$WORK"
else
  WORK=$BASE
fi
CUDA_ARCH=${CUDA_ARCH:-90}
BUDGET_S=${GPU_CHECK_BUDGET_S:-530}          # each step must end before 9 minutes
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
: > "$OUT/steps.tsv"
LOG=$OUT/gpu_check.log
[ $MODE = build ] && LOG=$OUT/build.log
exec > >(tee "$LOG") 2>&1     # all of it comes back, not only the output's tail
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
step_rc() { awk -F'\t' -v n="$1" '$1 == n { rc = $2 } END { print rc }' "$OUT/steps.tsv"; }

read -r SMALL_MIB LARGE_MIB <<< "${GPU_CHECK_SIZES:-1024 8192}"
SITE=$WORK/site                     # hypnos (links to the tree) and llama_cpp, on PYTHONPATH
SRC=$WORK/src
BUILD=$WORK/build
MODELS=$WORK/models
FACTS=$OUT/build-facts.tsv          # key<TAB>value, turned into build.json
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fact() { printf '%s\t%s\n' "$1" "$2" >> "$FACTS"; }

# The interpreter: PYTHON when given (its packages are used as they are); in a real run the
# one the build step chose (kept in $WORK/python), else the venv it makes.
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ $DRY = 1 ]; then
  PY=$ROOT/.venv/bin/python
  [ -x "$PY" ] || PY=python3
elif [ $MODE = checks ] && [ -s "$BASE/python" ]; then
  PY=$(cat "$BASE/python")
else
  PY=$WORK/venv/bin/python
fi

# CUDA: asked for unless GPU_CHECK_CUDA=OFF; a build without nvcc falls back to the CPU.
CUDA=${GPU_CHECK_CUDA:-ON}
NVCC=${GPU_CHECK_NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_FALLBACK=""
if [ "$CUDA" = ON ] && [ ! -x "$NVCC" ]; then
  CUDA=OFF CUDA_FALLBACK="no nvcc (looked for $NVCC): a CPU build"
fi

# ----------------------------------------------------------------------------- step 1

preflight() {
  : > "$FACTS"
  fact mode "$MODE"; fact dry_run "$DRY"; fact cores "$(nproc)"; fact python "$PY"
  fact cuda_requested "${GPU_CHECK_CUDA:-ON}"; fact cuda "$CUDA"; fact flash_attention "$FA"
  fact cuda_arch "$CUDA_ARCH"
  [ -n "$CUDA_FALLBACK" ] && { fact cuda_fallback "$CUDA_FALLBACK"; echo "CPU FALLBACK: $CUDA_FALLBACK"; }
  local gpus
  gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)
  echo "${gpus:-no nvidia-smi / no GPU}"
  while IFS= read -r line; do [ -n "$line" ] && fact gpu "$line"; done <<< "$gpus"
  if [ -x "$NVCC" ]; then
    "$NVCC" --version | tail -2
    fact nvcc "$NVCC"; fact nvcc_version "$("$NVCC" --version | grep -i release | tail -1)"
  fi
  python3 --version; free -g | head -2; df -h "$WORK" | tail -1
  if [ -f "$KIT/manifest.json" ]; then cat "$KIT/manifest.json"; return 0; fi
  echo "no kit at $KIT: run python bench/device_kit.py"
  [ $DRY = 1 ]                        # a dry run uses none of it
}

# A venv over the image's packages lets pip's resolver check the kit against them; when the
# image's python3 is itself a venv (a venv made from it would not see its packages) or has no
# venv module, the wheels go into $SITE without dependencies instead.
wheels() {
  if [ -n "${PYTHON:-}" ]; then echo "PYTHON=$PYTHON given: its packages, no wheels"; return; fi
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

# Where cuBLAS comes from: the toolkit's, else PyTorch's pip copy (nvidia/cublas); printed as
# "toolkit DIR", "pip DIR" or "missing".
CUBLAS=""
find_cublas() {
  local inc pip_cublas root
  root=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  case "$root" in /|/usr|/usr/local) root="" ;; esac    # nvcc is a wrapper outside a toolkit
  inc=$(find $root /usr/local/cuda*/ /usr/include -maxdepth 4 -name cublas_v2.h 2>/dev/null |
    head -1)
  if [ -n "$inc" ]; then echo "toolkit $(dirname "$inc")"; return; fi
  pip_cublas=$(python3 -c 'import nvidia.cublas, os; print(list(nvidia.cublas.__path__)[0])' 2>/dev/null)
  if [ -n "$pip_cublas" ]; then echo "pip $pip_cublas"; return; fi
  echo missing
}

cmake_flags() {
  # RUNPATH $ORIGIN (not the build folder's path): the copies install_llama_cpp puts in
  # llama_cpp/lib load each other, as a pip install's do, never the build tree's.
  local flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON
    -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON
    "-DGGML_CUDA=$CUDA" -DGGML_RPC=ON
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
  if [ "$CUDA" = ON ]; then
    flags+=("-DCMAKE_CUDA_COMPILER=$NVCC" "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH"
      "-DGGML_CUDA_FA=$FA")
    # No cuBLAS in the toolkit: PyTorch's pip copy, when the image has one.
    if [ "${CUBLAS%% *}" = pip ]; then
      local dir=${CUBLAS#pip } lib=${CUBLAS#pip }/lib
      flags+=("-DCMAKE_CUDA_FLAGS=-I$dir/include" "-DCMAKE_CXX_FLAGS=-I$dir/include"
        "-DCUDA_cublas_LIBRARY=$(ls "$lib"/libcublas.so* | head -1)"
        "-DCUDA_cublasLt_LIBRARY=$(ls "$lib"/libcublasLt.so* | head -1)")
    fi
  fi
  printf '%s\n' "${flags[@]}"
}

TARGETS=(llama ggml ggml-base ggml-cpu ggml-rpc mtmd llama-server)
[ "$CUDA" = ON ] && TARGETS+=(ggml-cuda)
build_plan() {
  if [ "$CUDA" = ON ]; then
    CUBLAS=$(find_cublas)
    echo "cuBLAS: $CUBLAS"; fact cublas "$CUBLAS"
  fi
  echo "cmake -S $SRC/vendor/llama.cpp -B $BUILD $(cmake_flags | tr '\n' ' ')"
  echo "cmake --build $BUILD -j $(nproc) --target ${TARGETS[*]}"
  fact cmake_flags "$(cmake_flags | tr '\n' ' ')"; fact targets "${TARGETS[*]}"
}

# A rerun on a warm machine reuses the source and the build (no re-extraction: new mtimes
# would rebuild everything): a build that finished left $BUILD/.hypnos-built with its flags.
build_llama() {
  local want
  want="$(cmake_flags | tr '\n' ' ')${TARGETS[*]}"
  if [ -f "$BUILD/.hypnos-built" ] && [ -x "$BUILD/bin/llama-server" ] &&
      [ "$(tail -n +2 "$BUILD/.hypnos-built")" = "$want" ]; then
    echo "built before ($(head -1 "$BUILD/.hypnos-built")) with the same flags: reused"
    fact build_reused "$(head -1 "$BUILD/.hypnos-built")"
    return 0
  fi
  rm -f "$BUILD/.hypnos-built"
  if [ ! -d "$SRC/vendor" ]; then
    mkdir -p "$SRC" && tar xzf "$KIT"/llama-cpp-python-*-trimmed.tar.gz -C "$SRC" --strip-components=1 ||
      return 1
  fi

  mapfile -t flags < <(cmake_flags)
  cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" "${flags[@]}" > "$OUT/cmake-configure.log" 2>&1 ||
    { tail -20 "$OUT/cmake-configure.log"; return 1; }
  grep -i "cuda toolkit\|cublas\|compiler identification" "$OUT/cmake-configure.log" | head -8
  # Stopped 40 s before the deadline, so the records still get written (a rerun resumes it).
  local left=$((DEADLINE - $(date +%s) - 40))
  [ "$left" -gt 0 ] || left=1
  timeout "$left" cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" \
    > "$OUT/cmake-build.log" 2>&1
  local rc=$?
  tail -5 "$OUT/cmake-build.log" 2>/dev/null
  [ $rc = 124 ] && { echo "the build ran out of time after ${left}s: rerun --build to resume it";
    fact build_timed_out "after ${left}s (rerun --build resumes it)"; }
  [ $rc = 0 ] && printf '%s\n%s\n' "$(date -u +%FT%TZ)" "$want" > "$BUILD/.hypnos-built"
  return $rc
}

# The pure-Python llama_cpp over the build's libraries (its loader looks in llama_cpp/lib;
# Hypnos reads the backend from the libraries found there). Put in place whole or not at all:
# a llama_cpp without its libraries would shadow any other on PYTHONPATH.
install_llama_cpp() {
  rm -rf "$SITE/llama_cpp" "$SITE/.llama_cpp.new"
  [ -f "$BUILD/.hypnos-built" ] || { echo "no finished build in $BUILD"; return 1; }
  cp -r "$SRC/llama_cpp" "$SITE/.llama_cpp.new" && mkdir -p "$SITE/.llama_cpp.new/lib" &&
    cp -a "$BUILD"/bin/*.so* "$SITE/.llama_cpp.new/lib/" &&
    mv "$SITE/.llama_cpp.new" "$SITE/llama_cpp" && ls "$SITE/llama_cpp/lib" || return 1
  local offload
  offload=$("$PY" -c 'import llama_cpp.llama_cpp as l; print(bool(l.llama_supports_gpu_offload()))') ||
    return 1
  echo "gpu offload: $offload"; fact gpu_offload "$offload"
  fact runpath "$(readelf -d "$SITE/llama_cpp/lib/libllama.so" 2>/dev/null | grep -io 'runpath.*' | head -1)"
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

# wait_models PID: the background writer, stopped 15 s before the deadline.
wait_models() {
  while kill -0 "$1" 2>/dev/null && [ "$(date +%s)" -lt $((DEADLINE - 15)) ]; do sleep 1; done
  if kill -0 "$1" 2>/dev/null; then
    kill "$1"; wait "$1"; echo "out of time writing the models: rerun to finish them"; return 124
  fi
  wait "$1"
}

# build.json from the facts and the steps, in $OUT and in $WORK (for the checks step).
record_build() {
  fact build_seconds "$(awk -F'\t' '$1 == "build_llama" { s = $3 } END { print s }' "$OUT/steps.tsv")"
  fact elapsed_seconds "$(( $(date +%s) - START ))"
  python3 "$ROOT/bench/gpu_build_record.py" --facts "$FACTS" --steps "$OUT/steps.tsv" \
    --models "$MODELS" --out "$OUT/build.json" && cp "$OUT/build.json" "$WORK/build.json"
}

build_step() {
  say "gpu_check.sh --build: root $ROOT, kit $KIT, work $WORK, out $OUT, dry run $DRY, CUDA $CUDA, flash attention $FA, budget ${BUDGET_S}s"
  always preflight preflight
  step wheels wheels
  echo "$PY" > "$WORK/python"
  always link_hypnos link_hypnos
  # The models are written (one core, the disk) while llama.cpp builds (every core).
  say "write_models, in the background (log: $OUT/write_models.log)"
  write_models > "$OUT/write_models.log" 2>&1 &
  local models_pid=$!
  always build_plan build_plan
  step build_llama build_llama
  step install_llama_cpp install_llama_cpp
  say "waiting for the models"
  always write_models wait_models $models_pid
  cat "$OUT/write_models.log"
  always record_build record_build
  local bad
  bad=$(awk -F'\t' '$2 != 0 && $2 != "dry"' "$OUT/steps.tsv")
  [ -z "$bad" ] && { say "build done: next, bash bench/gpu_check.sh$([ $DRY = 1 ] && echo ' --dry-run')"; return 0; }
  say "build step incomplete:"; echo "$bad"
  return 1
}

# ----------------------------------------------------------------------------- step 2

# What step 2 needs from step 1; prints what is missing.
build_missing() {
  [ -f "$BUILD/.hypnos-built" ] || echo "no finished llama.cpp build in $BUILD"
  [ -x "$BUILD/bin/llama-server" ] || echo "no $BUILD/bin/llama-server"
  ls "$SITE"/llama_cpp/lib/libllama.* > /dev/null 2>&1 || echo "no llama_cpp with its libraries in $SITE"
  [ -x "$PY" ] || command -v "$PY" > /dev/null || echo "no python at $PY"
}

checks_step() {
  say "gpu_check.sh: root $ROOT, work $WORK, out $OUT, dry run $DRY, budget ${BUDGET_S}s"
  if [ $DRY = 0 ]; then
    local missing
    missing=$(build_missing)
    if [ -n "$missing" ]; then
      echo "gpu_check.sh: no build to check in $WORK:"; echo "$missing"
      echo "run 'bash bench/gpu_check.sh --build' first (on the same machine, while it is warm)"
      printf '{"error": "no build: run bash bench/gpu_check.sh --build first", "rows": []}\n' \
        > "$OUT/gpu_check.json"
      return 3
    fi
    [ -f "$WORK/build.json" ] && cp "$WORK/build.json" "$OUT/build.json"
  fi
  always link_hypnos link_hypnos
  always write_models write_models     # a rerun finds them; a dry run writes its 10 MiB one
  local args
  if [ $DRY = 1 ]; then
    args=(--cpu-smoke --model "$MODELS/syn-10m.gguf")
  else
    args=(--models "$MODELS"/syn-1g-1.gguf "$MODELS"/syn-1g-2.gguf "$MODELS"/syn-1g-3.gguf
      --large "$MODELS/syn-8g.gguf" --llama-server "$BUILD/bin/llama-server")
  fi
  [ -f "$OUT/build.json" ] && args+=(--build-record "$OUT/build.json")
  # GPU_CHECK_ONLY=8,1,5: those checks alone, in that order (a short lease: the open issue's
  # check first).
  [ -n "${GPU_CHECK_ONLY:-}" ] && args+=(--only "$GPU_CHECK_ONLY")
  say "checks: bench/gpu_check.py ${args[*]}"
  local rc=0 deadline=$((DEADLINE - 15))
  # gpu_check.py keeps its own deadline; this stops it should it hang past that.
  timeout -k 5 $((deadline - $(date +%s) + 10)) "$PY" "$ROOT/bench/gpu_check.py" "${args[@]}" \
    --steps "$OUT/steps.tsv" --out "$OUT" --deadline "$deadline" || rc=$?
  if [ ! -s "$OUT/gpu_check.json" ]; then
    printf '{"error": "gpu_check.py exited %s without writing its results", "rows": []}\n' \
      "$rc" > "$OUT/gpu_check.json"
    echo "gpu_check.py exited $rc without writing its results" > "$OUT/gpu_check.txt"
  fi
  [ $rc = 124 ] && echo "gpu_check.py ran out of time: its table holds the checks it finished"
  say "done, exit $rc; results in $OUT (gpu_check.json, gpu_check.txt)"
  return $rc
}

rc=0
if [ $MODE = build ]; then build_step || rc=$?; else checks_step || rc=$?; fi
exit $rc
