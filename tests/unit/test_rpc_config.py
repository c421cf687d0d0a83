"""[[hardware.rpc_workers]]: endpoints on loopback or private networks only, unless allowed."""
from __future__ import annotations

import pytest

from hypnos.service.config.load import ConfigError, parse_config


def _cfg(*endpoints: str, allow: bool = False, **worker):
    return parse_config({"hardware": {
        "allow_public_rpc_workers": allow,
        "rpc_workers": [{"endpoint": e, **worker} for e in endpoints]}})


@pytest.mark.parametrize("endpoint", ["127.0.0.1:50052", "localhost:50052", "10.1.2.3:1",
                                      "192.168.0.9:50052", "[::1]:50052", "172.16.0.1:9"])
def test_loopback_and_private_endpoints_are_accepted(endpoint):
    cfg = _cfg(endpoint, memory_bytes=1 << 30)
    assert cfg.hardware.rpc_workers[0].endpoint == endpoint
    assert cfg.hardware.rpc_workers[0].memory_bytes == 1 << 30


def test_a_public_endpoint_is_refused_naming_the_key_and_the_option():
    with pytest.raises(ConfigError) as exc:
        _cfg("127.0.0.1:50052", "8.8.8.8:50052")
    (problem,) = exc.value.problems
    assert problem.startswith("hardware.rpc_workers[1].endpoint: 8.8.8.8 is a public address")
    assert "hardware.allow_public_rpc_workers" in problem


def test_the_operator_may_allow_a_public_endpoint():
    assert _cfg("8.8.8.8:50052", allow=True).hardware.rpc_workers[0].endpoint == "8.8.8.8:50052"


@pytest.mark.parametrize("endpoint,says", [
    ("127.0.0.1", "is not host:port"), ("127.0.0.1:0", "is not host:port"),
    ("127.0.0.1:99999", "is not host:port"), ("no-such-host.invalid:50052", "does not resolve"),
])
def test_bad_endpoints(endpoint, says):
    with pytest.raises(ConfigError) as exc:
        _cfg(endpoint)
    assert says in exc.value.problems[0]


def test_duplicates_and_ranges():
    with pytest.raises(ConfigError) as exc:
        parse_config({"hardware": {"rpc_workers": [
            {"endpoint": "127.0.0.1:1", "memory_bytes": 0},
            {"endpoint": "127.0.0.1:1", "bandwidth_bytes_per_s": 0}]}})
    problems = exc.value.problems
    assert "hardware.rpc_workers[0].memory_bytes: must be >= 1, got 0" in problems
    assert "hardware.rpc_workers[1].endpoint: duplicate endpoint '127.0.0.1:1'" in problems
    assert "hardware.rpc_workers[1].bandwidth_bytes_per_s: must be >= 1, got 0" in problems
