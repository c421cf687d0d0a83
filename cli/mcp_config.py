"""The Claude Code ``--mcp-config`` file that registers a Hypnos server's /mcp (the pool as
MCP tools, docs/clients.md): ``hypnos launch claude`` writes one and passes its path.

    path = write_mcp_config(folder / "hypnos-mcp.json", "http://127.0.0.1:9999", key)
    claude --mcp-config <path>

The file holds the key when one is given, so it is written readable by its owner only.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

SERVER_NAME = "hypnos"
MCP_PATH = "/mcp"


def mcp_url(base_url: str) -> str:
    """The /mcp URL of a server from its base URL (with or without a trailing /v1 or /)."""
    base = base_url.rstrip("/").removesuffix("/v1").rstrip("/")
    return base + MCP_PATH


def mcp_config(base_url: str, key: str | None = None, name: str = SERVER_NAME) -> dict:
    """Claude Code's MCP config naming the server as ``name``: a streamable HTTP server at
    ``<base_url>/mcp``, with ``Authorization: Bearer <key>`` when a key is given."""
    server: dict = {"type": "http", "url": mcp_url(base_url)}
    if key:
        server["headers"] = {"Authorization": f"Bearer {key}"}
    return {"mcpServers": {name: server}}


def write_mcp_config(path: Path, base_url: str, key: str | None = None,
                     name: str = SERVER_NAME) -> Path:
    """Write `mcp_config` as JSON at ``path`` (mode 0600: it may hold the key); returns
    ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(mcp_config(base_url, key, name), indent=2) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(path, 0o600)
    return path
