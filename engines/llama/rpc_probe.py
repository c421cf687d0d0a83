"""Talk to a llama.cpp ``rpc-server`` without llama.cpp: is it there, and how much memory does
it report. Stdlib only; blocking calls with a timeout, for worker threads.

llama.cpp's own client aborts the whole process when a worker does not answer, so Hypnos asks
each worker itself before an engine connects to it. The wire format (ggml-rpc.cpp, protocol
7.x): a request is ``cmd (u8) | size (u64 LE) | payload``, a reply ``size (u64) | payload``;
HELLO (14) must come first, then DEVICE_COUNT (15) and GET_DEVICE_MEMORY (11, device u32 ->
free u64, total u64). A worker serves one client at a time: while an engine holds it, a probe
waits in its accept queue and times out.
"""
from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

RPC_PROTO_MAJOR = 7
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS = 24                    # bytes of transport capabilities in HELLO (all zero: TCP)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) -> (host, port); ValueError when it is not one."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{endpoint!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def endpoint_problem(endpoint: str, allow_public: bool) -> str | None:
    """Why ``endpoint`` may not be used as a worker, or None. Without ``allow_public`` every
    address the host resolves to must be loopback or private (RPC has no authentication)."""
    try:
        host, port = split_endpoint(endpoint)
    except ValueError as exc:
        return str(exc)
    if allow_public:
        return None
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, port,
                                                               type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError) as exc:
        return f"{host!r} does not resolve ({exc})"
    public = sorted(a for a in addresses if not _private(a))
    if public:
        return (f"{host} is a public address ({', '.join(public)}); RPC workers have no "
                "authentication: use loopback or a private network, or set "
                "hardware.allow_public_rpc_workers = true")
    return None


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.is_loopback or ip.is_private


@dataclass(frozen=True)
class WorkerReport:
    """What one probe found: ``answers`` with the worker's first device's memory, or why
    not (``error``)."""
    answers: bool
    free_bytes: int = 0
    total_bytes: int = 0
    devices: int = 0
    version: str = ""
    error: str = ""


def _call(sock: socket.socket, cmd: int, payload: bytes, reply: int) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    size = struct.unpack("<Q", _recv(sock, 8))[0]
    if size != reply:
        raise ConnectionError(f"command {cmd}: a {size}-byte reply, {reply} expected")
    return _recv(sock, reply)


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the worker closed the connection")
        data += chunk
    return data


def probe(endpoint: str, timeout: float = 2.0) -> WorkerReport:
    """HELLO, device count and device 0's memory from the worker at ``endpoint``. Blocks up
    to about ``timeout`` seconds per step; never raises."""
    try:
        host, port = split_endpoint(endpoint)
        with socket.create_connection((host, port), timeout=timeout) as sock:
            hello = _call(sock, CMD_HELLO, bytes(CONN_CAPS), 4 + CONN_CAPS)
            major, minor, patch = hello[0], hello[1], hello[2]
            version = f"{major}.{minor}.{patch}"
            if major != RPC_PROTO_MAJOR:
                return WorkerReport(False, version=version,
                                    error=f"RPC protocol {version}; this build speaks "
                                          f"{RPC_PROTO_MAJOR}.x")
            (count,) = struct.unpack("<I", _call(sock, CMD_DEVICE_COUNT, b"", 4))
            if count == 0:
                return WorkerReport(False, version=version, error="the worker has no device")
            free, total = struct.unpack(
                "<QQ", _call(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", 0), 16))
            return WorkerReport(True, free, total, count, version)
    except TimeoutError:
        return WorkerReport(False, error=f"no answer within {timeout:g} s (down, or serving "
                                         "another client)")
    except (OSError, ValueError) as exc:
        return WorkerReport(False, error=str(exc) or type(exc).__name__)
