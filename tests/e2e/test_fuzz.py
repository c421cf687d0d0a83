"""schemathesis against the default lineup on a real `hypnos serve`, bounded in examples and
time (a fixed seed, so CI is repeatable; bench/fuzz.py is the long, random-seed run), every
check on (`--checks all`): no 5xx, every status documented, every error in the envelope, every
response valid against /openapi.json, schema-valid requests accepted and schema-invalid ones
refused, 405 for a wrong method.

The server's models_dir is a tree of hard links to the shared model files: the fuzzer reaches
/api/delete and DELETE /v1/models, and a delete there removes links, never the shared copies."""
import os
from pathlib import Path

import pytest

from conftest import MODELS_DIR

from hypnos.bench.fuzz import default_lineup, schemathesis

pytestmark = [pytest.mark.real, pytest.mark.slow]
EXAMPLES, MAX_TIME_S, SEED = 8, 50, 20261129


def _linked_tree(source: Path, dest: Path) -> Path:
    for path in source.rglob("*"):
        if path.is_file():
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, target)
    return dest


def test_schemathesis_finds_nothing_on_the_default_lineup(tmp_path):
    models = _linked_tree(MODELS_DIR, tmp_path / "models")
    server = default_lineup(tmp_path / "server.log", models)
    try:
        result = schemathesis(server.base, EXAMPLES, MAX_TIME_S, SEED)
        server.proc.poll()
        assert server.proc.returncode is None, "the server died under the fuzzer"
    finally:
        server.stop()
    report = result.stdout[-15000:]
    assert result.returncode == 0, report + result.stderr[-3000:]
    assert "generated" in report and "Selected: " in report
