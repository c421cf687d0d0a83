#!/usr/bin/env bash
# Administer a running Hypnos server: wait until it is ready, add a model, move it to tier 1,
# check the status, show the recent errors. HYPNOS_URL and HYPNOS_API_KEY say which server
# (an admin key when the server has keys). FOLLOW=1 keeps printing errors as they happen.
set -euo pipefail
model="${1:-smollm2:135m}"

hypnos ready --wait 300          # exit 3 while nothing listens, 1 while it is still staging

if hypnos models list --json | grep -F "\"id\": \"$model\"" >/dev/null; then
  echo "$model is already in the pool"
else
  hypnos models add "$model"     # its files must be in models_dir: hypnos models pull "$model"
fi

hypnos tier move "$model" 1 --context 4096

hypnos tier --json | python3 -c '
import json, sys
model = sys.argv[1]
m = next(m for m in json.load(sys.stdin)["models"] if m["id"] == model)
print("%s: %s, %d GPU layers, context %d" % (model, m["current_tier"],
      m["placement"]["gpu_layers"], m["placement"]["allocated_context_len"]))
sys.exit(m["current_tier"] != "tier1_gpu_vram")' "$model"

if [ "${FOLLOW:-0}" = 1 ]; then
  exec hypnos logs --status error --follow
fi
hypnos logs --status error --limit 10
