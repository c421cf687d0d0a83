"""schemathesis against the default lineup on a real `hypnos serve`, bounded in examples and
time (a fixed seed, so CI is repeatable; bench/fuzz.py is the long, random-seed run), every
check on (`--checks all`): no 5xx, every status documented, every error in the envelope, every
response valid against /openapi.json, schema-valid requests accepted and schema-invalid ones
refused, 405 for a wrong method."""
import pytest

from hypnos.bench.fuzz import default_lineup, schemathesis

pytestmark = [pytest.mark.real, pytest.mark.slow]
EXAMPLES, MAX_TIME_S, SEED = 8, 50, 20261129


def test_schemathesis_finds_nothing_on_the_default_lineup(tmp_path):
    server = default_lineup(tmp_path / "server.log")
    try:
        result = schemathesis(server.base, EXAMPLES, MAX_TIME_S, SEED)
        server.proc.poll()
        assert server.proc.returncode is None, "the server died under the fuzzer"
    finally:
        server.stop()
    report = result.stdout[-15000:]
    assert result.returncode == 0, report + result.stderr[-3000:]
    assert "generated" in report and "Selected: " in report
