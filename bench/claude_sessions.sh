#!/usr/bin/env bash
# Claude Code against `hypnos serve` on the default lineup (issue 36): two `claude -p` sessions
# back to back, then a third after a restart of the server over the same state folder, and
# what the request log says each /v1/messages request reused (the slot, RAM, disk).
#   npm install --prefix /tmp/agents @anthropic-ai/claude-code@2.1.197
#   bench/claude_sessions.sh [/tmp/agents/node_modules/.bin/claude]
# Nothing but the base URL, a key and the model name is set for the client. Takes minutes
# on a CPU: the first session prefills about 21,000 tokens.
set -u
claude="${1:-/tmp/agents/node_modules/.bin/claude}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/hypnos-claude-XXXXXX)"
export HF_HUB_OFFLINE=1 XDG_DATA_HOME="$work/data"
export HYPNOS_MODELS_DIR="${HYPNOS_MODELS_DIR:-$root/models}"
port=9977
mkdir -p "$work/project"

serve() {
  (cd "$root" && exec .venv/bin/hypnos serve --port "$port") > "$work/serve-$1.log" 2>&1 &
  srv=$!
  for _ in $(seq 1 120); do curl -sf "localhost:$port/ready" > /dev/null && return; sleep 2; done
  echo "the server did not become ready (see $work/serve-$1.log)"; exit 1
}
session() {
  local t0; t0=$(date +%s)
  (cd "$work/project" && ANTHROPIC_BASE_URL="http://127.0.0.1:$port" ANTHROPIC_API_KEY=unused \
    timeout 1800 "$claude" -p "Reply with the single word: ready" --model qwen2.5-coder:0.5b) \
    > "$work/claude-$1.out" 2>&1
  echo "session $1: exit $? in $(( $(date +%s) - t0 )) s"
}
requests() {
  curl -s "localhost:$port/v1/logs?limit=100" | python3 -c '
import json, sys
for r in reversed(json.load(sys.stdin)["records"]):
    if r["route"] == "/v1/messages":
        print(" ", r["started_at"], "prompt", r["tokens_in"], "reused", r["cached_tokens"],
              r.get("cached_from"), f"{r[\"duration_ms\"] / 1000:.1f} s")'
}

serve 1
session 1
session 2
requests
kill "$srv"; wait "$srv" 2> /dev/null
serve 2
session 3
requests
kill "$srv"; wait "$srv" 2> /dev/null
rm -rf "$work"
