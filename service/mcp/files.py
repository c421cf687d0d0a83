"""Files an MCP tool may read by path on the server's side: only under a folder of
``server.mcp_file_roots`` (none by default, so no path is read at all).

A path is refused when it holds a ``..`` part, is not absolute, or, once every symlink in it
is resolved, does not lie under one of the roots (each resolved too): a link inside a root
that points outside it is refused like the outside path itself. Reading is bounded by the
tool's byte limit, checked on the file's size before it is read.
"""
from __future__ import annotations

from pathlib import Path, PurePath

from hypnos.service.mcp.refusal import ToolRefused


def roots_of(roots: list[str], config_dir: Path | None) -> list[Path]:
    """The configured roots, resolved (a relative one from the config file's folder)."""
    out = []
    for root in roots:
        path = Path(root).expanduser()
        if not path.is_absolute() and config_dir is not None:
            path = config_dir / path
        out.append(path.resolve())
    return out


def allowed_file(path: str, roots: list[Path]) -> Path:
    """The resolved file ``path`` names, when reading it is allowed; `ToolRefused` naming
    the reason otherwise."""
    if not roots:
        raise ToolRefused("This server reads no files by path (server.mcp_file_roots is "
                          "empty): send the file's bytes as base64 instead")
    if ".." in PurePath(path).parts:
        raise ToolRefused(f"The path {path!r} holds '..'; name the file by its plain "
                          "absolute path under server.mcp_file_roots")
    if not Path(path).is_absolute():
        raise ToolRefused(f"The path {path!r} is not absolute; name the file by its absolute "
                          "path under server.mcp_file_roots")
    real = Path(path).resolve()
    if not any(real.is_relative_to(root) for root in roots):
        raise ToolRefused(f"The path {path!r} is outside server.mcp_file_roots (symlinks "
                          "resolved); this server reads files only under: "
                          + ", ".join(str(r) for r in roots))
    if not real.is_file():
        raise ToolRefused(f"The path {path!r} is not a file this server can read")
    return real


def read_allowed(path: str, roots: list[Path], max_bytes: int, limit_name: str) -> bytes:
    """The bytes of the file ``path`` names (`allowed_file`), at most ``max_bytes``."""
    real = allowed_file(path, roots)
    size = real.stat().st_size
    if size > max_bytes:
        raise ToolRefused(f"The file {path!r} is {size} bytes; {limit_name} is {max_bytes}")
    try:
        return real.read_bytes()
    except OSError as exc:
        raise ToolRefused(f"The file {path!r} could not be read: {exc.strerror}") from None
