"""`hypnos serve` itself, model-free: a config with no models, so each case costs a
process start (a couple of seconds) and loads nothing."""
import socket
import subprocess
import sys

import pytest

from hypnos.bench.harness import ROOT, ServerProcess, free_port


@pytest.fixture
def empty_config(tmp_path):
    path = tmp_path / "hypnos.toml"
    path.write_text("config_version = 1\n")
    return path


def serve(config, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "hypnos.cli", "serve", "--config", str(config),
                           *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_sanics_lines_are_printed_once_in_our_format(empty_config, tmp_path):
    srv = ServerProcess(empty_config, tmp_path / "server.log", ready_timeout=60)
    srv.stop()
    log = (tmp_path / "server.log").read_text()
    for line in ("Starting worker", "Worker ready", "Stopping worker", "Server Stopped"):
        assert log.count(line) == 1, log
    # Ours is "<asctime> <logger name> <message>"; Sanic's own is "Main  <date> ... INFO: ".
    assert "INFO:" not in log, log
    assert " sanic.server Worker ready [" in log, log


def test_a_port_in_use_is_one_line_and_exit_1(empty_config):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = serve(empty_config, "--host", "127.0.0.1", "--port", str(port))
    assert r.returncode == 1, r.stderr
    assert r.stderr == (f"hypnos: cannot listen on 127.0.0.1:{port}: address already in use "
                        "(another server? pick another with --port)\n")
    assert "Traceback" not in r.stdout + r.stderr


def test_a_host_that_does_not_resolve_is_one_line_and_exit_1(empty_config):
    port = free_port()
    r = serve(empty_config, "--host", "no-such-host.invalid", "--port", str(port))
    assert r.returncode == 1, r.stderr
    assert r.stderr == (f"hypnos: cannot listen on no-such-host.invalid:{port}: the host does "
                        "not resolve (check --host or server.host)\n")
    assert "Traceback" not in r.stdout + r.stderr
