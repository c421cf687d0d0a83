"""Start `hypnos serve` as a real process on 127.0.0.1 and talk to it (benchmarks and the
end-to-end tests share this)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ManagedProcess:
    """A server command on a free port on 127.0.0.1, ready once ``ready_path`` answers 200;
    ``stop()`` ends it. ``command(port)`` builds the argument list."""

    def __init__(self, command, log_path: Path, ready_path: str, ready_timeout: float,
                 env: dict | None = None, cwd: Path | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w+")  # noqa: SIM115 (the server writes it until stop())
        self.proc = subprocess.Popen(command(self.port), stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, cwd=cwd)
        self.wait_ready(ready_path, ready_timeout)

    def wait_ready(self, path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(self.base + path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.log.seek(0)
        raise RuntimeError("server did not become ready:\n" + self.log.read()[-4000:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class ServerProcess(ManagedProcess):
    """``hypnos serve --config <path>`` on a free port; ``launcher`` replaces the
    ``-m hypnos.cli`` that runs it (a script that ends in the same command)."""

    def __init__(self, config_path: Path, log_path: Path, ready_timeout: float = 180,
                 env: dict | None = None, launcher: tuple[str, ...] = ("-m", "hypnos.cli")):
        # The config's models_dir is the one meant, unless the caller says otherwise.
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("HYPNOS_API_KEYS", "HYPNOS_MODELS_DIR")}
        env = {**inherited, "HF_HUB_OFFLINE": "1", **(env or {})}
        super().__init__(
            lambda port: [sys.executable, *launcher, "serve", "--config",
                          str(config_path), "--port", str(port)],
            log_path, "/ready", ready_timeout, env=env, cwd=ROOT)

    def get(self, path: str) -> dict:
        return httpx.get(self.base + path, timeout=60).json()

    def post(self, path: str, body: dict, timeout: float = 600) -> httpx.Response:
        return httpx.post(self.base + path, json=body, timeout=timeout)

    def status(self) -> dict:
        return self.get("/v1/memory/status")

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0
