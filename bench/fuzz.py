"""Fuzz a running (or freshly started) `hypnos serve` with schemathesis against its own
/openapi.json: no 5xx, every status documented, every error body in the envelope, every
response valid against the document.

    python bench/fuzz.py                      # start the default lineup, a long run (~20 min)
    python bench/fuzz.py --url http://127.0.0.1:9999 --examples 500 --max-time 3600

CI runs a short, fixed-seed version of the same (tests/e2e/test_fuzz.py); this script is the
nightly-style run with a random seed that a person starts. It prints schemathesis's report
and exits with its status.

Every check runs (`--checks all`): a schema-valid body is accepted (a random model id is a
404, which the check allows), a schema-invalid one refused, a known path with another method
is a 405 with an Allow header. `bench/schemathesis.toml` names the operations whose
400s depend on meaning the schema cannot state (a tool_choice naming a missing tool, a tool
result or call output answering no earlier call, a model block's TOML, a machine too small for
any model of a need, a WebSocket handshake, a keep_alive duration string over a year); every
other refusal of a schema-valid request is a 404 for a model that does not exist.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hypnos.bench.harness import ROOT, ManagedProcess

CONFIG = ROOT / "bench" / "schemathesis.toml"


def default_lineup(log: Path, models_dir: Path | None = None) -> ManagedProcess:
    """`hypnos serve` with no config: the default lineup from models_dir (``models_dir``, else
    the environment's)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if models_dir is not None:
        env["HYPNOS_MODELS_DIR"] = str(models_dir)
    env.pop("HYPNOS_API_KEYS", None)
    return ManagedProcess(lambda port: [sys.executable, "-m", "hypnos.cli", "serve", "--port",
                                        str(port)], log, "/ready", 180, env=env, cwd=ROOT)


def schemathesis(url: str, examples: int, max_time: int, seed: int | None,
                 phases: str = "coverage,fuzzing") -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("schemathesis")
    cmd = [str(exe), "--config-file", str(CONFIG), "run", f"{url}/openapi.json",
           "--phases", phases, "--checks", "all",
           "--max-examples", str(examples), "--max-time", str(max_time), "--request-timeout", "60",
           "--suppress-health-check", "all", "--no-color", "--generation-database", "none"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    with tempfile.TemporaryDirectory() as scratch:    # its caches stay out of the repo
        return subprocess.run(cmd, capture_output=True, text=True, cwd=scratch)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server; default: start the default lineup")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--max-time", type=int, default=1200)
    ap.add_argument("--seed", type=int)
    args = ap.parse_args()
    server = None
    if args.url is None:
        server = default_lineup(Path(tempfile.mkdtemp()) / "server.log")
    try:
        result = schemathesis(args.url or server.base, args.examples, args.max_time, args.seed)
    finally:
        if server is not None:
            server.stop()
    print(result.stdout[-20000:], result.stderr[-4000:], sep="\n")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
