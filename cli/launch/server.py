"""Finding the server a client is launched against, starting one when asked, and reading what
the launch needs from it. Every call blocks; HTTP calls give up after a few seconds."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import click

from hypnos.cli.client import Client, ServerSaidNo, Unreachable
from hypnos.cli.launch.choice import ServedModel

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
DEFAULT_CAP = 8192            # limits.max_tokens_cap's default
DEFAULT_REQUEST_TIMEOUT = 900  # limits.request_timeout_secs's default
METRIC = re.compile(r'^hypnos_chat_prefill_tokens_per_s\{model="([^"]+)"\}\s+([0-9.eE+-]+)$',
                    re.MULTILINE)


@dataclass(frozen=True)
class Local:
    """What this machine's config says about its own server."""
    url: str
    max_tokens_cap: int = DEFAULT_CAP
    request_timeout_secs: int = DEFAULT_REQUEST_TIMEOUT


@dataclass(frozen=True)
class Facts:
    """What the launch reads from a running server."""
    models: list[ServedModel]          # chat models, in the server's order
    prefill_tps: dict[str, float]      # measured prefill speed by model (absent: not measured)


def local_server(config) -> Local:
    """The URL this machine's config serves on, and its limits (the server does not publish
    max_tokens_cap or request_timeout_secs)."""
    host = config.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    scheme = "https" if config.server.tls and config.server.tls.cert else "http"
    return Local(f"{scheme}://{host}:{config.server.port}", config.limits.max_tokens_cap,
                 config.limits.request_timeout_secs)


def is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOOPBACK


def refusal_advice(err: ServerSaidNo, url: str) -> str:
    """What to change when the server refuses the launch's own requests."""
    host = urlsplit(url).hostname or url
    if err.status == 401:
        return (f"the server at {url} wants an API key: set HYPNOS_API_KEY (or --api-key) to "
                "one of its server.api_keys or [[server.keys]] keys")
    if err.status == 403:
        return (f"the server at {url} refused this client ({err}): it answers only the host "
                f"names it knows; add \"{host}\" to server.allowed_hosts in the server's "
                "config (or \"*\" behind a reverse proxy that checks Host), or use its "
                "loopback address")
    return f"the server at {url} said no: {err}"


def read_facts(client: Client) -> Facts:
    """The chat models (context, tool calls, residency, reasoning) and measured prefill
    speeds. Raises ClickException naming the setting to change when the server refuses."""
    try:
        listing = client.get("/v1/models", timeout=30)
    except ServerSaidNo as err:
        raise click.ClickException(refusal_advice(err, client.base)) from None
    known = _catalog_capabilities(client)
    models = []
    for row in listing.get("data", []):
        if row.get("alias_of") or "context_window" not in row:
            continue
        caps = known.get(row["id"])
        tools = "tools" in caps if caps is not None else _tools(client, row["id"])
        models.append(ServedModel(
            row["id"], int(row["context_window"]), tools,
            resident=row.get("current_tier") == "tier1_gpu_vram",
            thinking=("thinking" in caps) if caps is not None else None))
    return Facts(models, _prefill_speeds(client))


def _catalog_capabilities(client: Client) -> dict[str, list[str]]:
    try:
        body = client.get("/v1/models/catalog", timeout=30)
    except (ServerSaidNo, Unreachable):
        return {}
    return {e["id"]: list(e.get("capabilities", [])) for e in body.get("data", [])
            if e.get("configured")}


def _tools(client: Client, model: str) -> bool:
    try:
        return "tools" in client.post("/api/show", {"model": model}, timeout=30)["capabilities"]
    except (ServerSaidNo, Unreachable, KeyError):
        return False


def _prefill_speeds(client: Client) -> dict[str, float]:
    try:
        text = client.request("GET", "/metrics", timeout=10).text
    except (ServerSaidNo, Unreachable, click.ClickException):
        return {}
    return {m: float(v) for m, v in METRIC.findall(text) if float(v) > 0}


def idle_timeout_ms(prompt_tokens: int, prefill_tps: float | None,
                    request_timeout_secs: int) -> int:
    """How long a client should let a stream stay silent: three times the measured time to
    read its first prompt plus a minute (a long prompt reads slower than the short ones
    measured, and the machine may be busy), at least the clients' own 300 s and at most the
    server's request timeout (it gives up on the request then); the request timeout when the
    speed was never measured."""
    ceiling = max(300, request_timeout_secs)
    secs = ceiling if not prefill_tps else 3 * prompt_tokens / prefill_tps + 60
    return int(min(max(secs, 300), ceiling) * 1000)


class StartedServer:
    """A ``hypnos serve`` this launch started (``--serve``); ``stop`` ends it."""

    def __init__(self, config_path: Path | None, url: str, ready_secs: float = 900):
        port = urlsplit(url).port or 9999
        self.log_path = Path(tempfile.mkstemp(prefix="hypnos-launch-serve-", suffix=".log")[1])
        argv = [sys.executable, "-m", "hypnos.cli", "serve", "--port", str(port)]
        if config_path is not None:
            argv += ["--config", str(config_path)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=dict(os.environ))
        self.wait_ready(Client(url), ready_secs)

    def wait_ready(self, client: Client, ready_secs: float) -> None:
        deadline = time.monotonic() + ready_secs
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise click.ClickException(f"hypnos serve exited ({self.proc.returncode}); "
                                           f"its log: {self.log_path}")
            try:
                client.get("/ready", timeout=5)
                return
            except (ServerSaidNo, Unreachable, click.ClickException):
                time.sleep(0.5)
        self.stop()
        raise click.ClickException(f"hypnos serve was not ready within {ready_secs:g} s; "
                                   f"its log: {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
