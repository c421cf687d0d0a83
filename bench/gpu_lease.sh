#!/usr/bin/env bash
# Both GPU check steps in ONE device call, for a lease too short for two (15 minutes of device
# time, the machine's start included, and a warm machine that goes back 30 s after a call):
#
#   run(command="bash bench/gpu_lease.sh", carry=[".devkit"], timeout_s=545)
#
# The build (bench/gpu_check.sh --build) gets at most GPU_LEASE_BUILD_S (420 s); the checks get
# what is left until GPU_LEASE_S (520 s) after the start, in the order GPU_CHECK_ONLY
# (default 8,1,5,4,2,3,6,7: the open issue's check first). A device call returns at most 8
# files, so both steps write to a work folder and only these come back in $OUT: build.json,
# build.log, probe.txt, gpu_check.json, gpu_check.txt, gpu_check.log, spec_step_costs.json,
# and rest.tgz (everything else the steps wrote: CMake and server logs, configs). Extra arguments
# (--dry-run) go to both steps.
set -u
export PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T0=$(date +%s)
RESULTS=${OUT:-$ROOT/gpu-lease-out}
WORKOUT=${GPU_LEASE_WORKOUT:-/tmp/hypnos-gpu-lease-out}
rm -rf "$WORKOUT" && mkdir -p "$WORKOUT" "$RESULTS"
BUILD_S=${GPU_LEASE_BUILD_S:-420}
LEASE_S=${GPU_LEASE_S:-520}

OUT=$WORKOUT GPU_CHECK_BUDGET_S=$BUILD_S bash "$ROOT/bench/gpu_check.sh" --build "$@" \
  > /dev/null 2>&1
echo "== build: exit $? after $(( $(date +%s) - T0 )) s"
tail -n 12 "$WORKOUT/build.log" 2>/dev/null
cp "$WORKOUT/build.json" "$WORKOUT/build.log" "$RESULTS/" 2>/dev/null

# The probe (bench/gpu_probe.py, GPU_LEASE_PROBE=0 skips it): the engine's load with one
# suspect off at a time, each in its own process; a native stack of the unpatched one from
# cuda-gdb beside it. The checks then run with the first cure it found (HYPNOS_GPU_PATCHES,
# bench/gpu_patch/sitecustomize.py), said in the output.
GW=${GPU_CHECK_WORK:-/tmp/hypnos-gpu}
MODEL=$GW/models/syn-1g-1.gguf
[ "$*" = "--dry-run" ] && GW=$GW/dry-run MODEL=$GW/models/syn-10m.gguf
PY=$(cat "$GW/python" 2>/dev/null || echo python3)
if [ "${GPU_LEASE_PROBE:-1}" = 1 ] && [ -s "$MODEL" ]; then
  export PYTHONPATH=$GW/site${PYTHONPATH:+:$PYTHONPATH}
  GDB=$(command -v cuda-gdb || command -v gdb)
  if [ -n "$GDB" ]; then
    timeout 100 "$GDB" -q -batch -ex "set pagination off" -ex "handle SIGPIPE nostop" \
      -ex run -ex bt -ex "thread apply all bt 6" --args "$PY" "$ROOT/bench/gpu_probe.py" \
      "$MODEL" --child "" > "$WORKOUT/gdb.log" 2>&1 &
    GDB_PID=$!
  fi
  echo "== probe ($PY, $MODEL)"
  timeout 120 "$PY" "$ROOT/bench/gpu_probe.py" "$MODEL" --out "$WORKOUT" --timeout 25 \
    2>&1 | tee "$WORKOUT/probe.txt"
  if [ -n "${GDB_PID:-}" ]; then
    for _ in $(seq 15); do kill -0 "$GDB_PID" 2>/dev/null || break; sleep 1; done
    kill "$GDB_PID" 2>/dev/null
    echo "== cuda-gdb's stack (the unpatched load)"
    grep -E "^#[0-9]+ |signal|SIGSEGV" "$WORKOUT/gdb.log" | head -40
  fi
  CURE=$(sed -n 's/^cure: //p' "$WORKOUT/probe.txt")
  case "$CURE" in
    as-is|none|"") ;;
    *) PATCHES=$("$PY" -c "import sys; sys.path.insert(0, '$ROOT/bench'); import gpu_probe; print(','.join(gpu_probe.VARIANTS['$CURE']))")
       export HYPNOS_GPU_PATCHES=$PATCHES PYTHONPATH=$ROOT/bench/gpu_patch:$PYTHONPATH
       echo "== the checks run with the probe's cure: HYPNOS_GPU_PATCHES=$PATCHES" ;;
  esac
fi

LEFT=$(( T0 + LEASE_S - $(date +%s) ))
echo "== checks: ${LEFT} s left"
OUT=$WORKOUT GPU_CHECK_BUDGET_S=$LEFT GPU_CHECK_ONLY=${GPU_CHECK_ONLY:-8,1,5,4,2,3,6,7} \
  bash "$ROOT/bench/gpu_check.sh" "$@" > /dev/null 2>&1
rc=$?
echo "== checks: exit $rc after $(( $(date +%s) - T0 )) s"
cat "$WORKOUT/gpu_check.txt" 2>/dev/null
for f in gpu_check.json gpu_check.txt gpu_check.log spec_step_costs.json probe.txt; do
  [ -f "$WORKOUT/$f" ] && cp "$WORKOUT/$f" "$RESULTS/"
done
tar czf "$RESULTS/rest.tgz" -C "$(dirname "$WORKOUT")" "$(basename "$WORKOUT")" 2>/dev/null
ls -la "$RESULTS"
exit $rc
