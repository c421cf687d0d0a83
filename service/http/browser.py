"""Which web pages and which host names may reach the server: the first check of the request
middleware (http/layers.py), on every route, WebSocket upgrades and CORS preflights included.

A browser lets any page send a "simple" request (a form post, ``text/plain``, no preflight)
to any address, and DNS rebinding lets a page reach a local port under the page's own
foreign name. Each leaves a mark a server can read: a page's request carries ``Origin``, a
rebound one a ``Host`` naming the foreign site. So a request is refused (403) when

- its ``Host`` is not a loopback name, not one of this machine's names or addresses, not the
  configured ``server.host`` and not in ``server.allowed_hosts`` (``"*"``: any; ports never
  matter), or
- its ``Origin`` is not a loopback page, not this server's own page (an origin whose host
  and port are the request's allowed ``Host``: the playground opened on a LAN name) and not
  in ``server.allowed_origins`` (``"*"`` any; ``"http://host:*"`` any port; ``Origin: null``
  only when ``"null"`` is listed).

No ``Origin`` (curl, the SDKs) and no ``Host`` (HTTP/1.0) pass both checks.
"""
from __future__ import annotations

import functools
import ipaddress
import re
import socket
from urllib.parse import urlparse

from sanic import Request

from hypnos.service.config.schema import ServerConfig
from hypnos.service import errors
from hypnos.service.state import state_of

WILDCARD_BINDS = ("", "0.0.0.0", "::", "[::]")
# Documentation addresses (RFC 5737, RFC 3849): a UDP "connect" to them sends nothing and
# tells which local address the machine would use to reach the network.
ROUTE_PROBES = ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1"))


def host_name(host: str) -> str:
    """The name in a Host header or an allow-list entry: lower case, no port, no brackets,
    no trailing dot (``"Box.LAN:9999"`` -> ``"box.lan"``, ``"[::1]:80"`` -> ``"::1"``)."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:           # name:port; a bare IPv6 address has several colons
        host = host.partition(":")[0]
    return host.rstrip(".")


def is_loopback(name: str) -> bool:
    """localhost, a name under .localhost, 127.0.0.0/8 or ::1 (``name`` as `host_name`)."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@functools.cache
def machine_names() -> frozenset[str]:
    """This machine's host name, its fully qualified name, its mDNS name (``<host>.local``),
    the addresses the first two resolve to and the addresses it reaches the network from.
    Blocks on the resolver, once per process (the first call; `install_http_layers` makes it
    at app creation): an address taken later (a new network) is still answered through the
    connection's own local address."""
    names = {socket.gethostname(), socket.getfqdn()}
    for name in list(names):
        try:
            names |= {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    names.add(socket.gethostname().partition(".")[0] + ".local")     # not resolved: mDNS
    for family, probe in ROUTE_PROBES:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                names.add(str(s.getsockname()[0]))
        except OSError:
            pass
    return frozenset(host_name(n) for n in names if n)


def host_allowed(name: str, server: ServerConfig, own: frozenset[str],
                 local_address: str = "") -> bool:
    """Whether the server answers a request whose Host names ``name`` (as `host_name`);
    ``local_address`` is the address the connection arrived on, when known."""
    local = host_name(local_address).removeprefix("::ffff:")     # IPv4 on a dual-stack port
    if is_loopback(name) or name in own or (local and name == local):
        return True
    if server.host not in WILDCARD_BINDS and name == host_name(server.host):
        return True
    return any(entry == "*" or host_name(entry) == name for entry in server.allowed_hosts)


def origin_listed(origin: str, allowed: list[str]) -> bool:
    """A loopback page's origin, or one ``allowed`` (``server.allowed_origins``) names:
    exactly, with a ``:*`` port wildcard, or by ``"*"`` (which never covers ``null``)."""
    origin = origin.strip().lower()
    if origin == "null":
        return "null" in allowed
    try:
        parsed = urlparse(origin)
    except ValueError:
        return False
    if parsed.scheme in ("http", "https") and is_loopback(host_name(parsed.hostname or "")):
        return True
    for pattern in (p.strip().lower().rstrip("/") for p in allowed):
        if pattern in (origin, "*"):
            return True
        if pattern.endswith(":*") and re.fullmatch(re.escape(pattern[:-2]) + r"(:\d+)?", origin):
            return True
    return False


def own_origin(origin: str, host: str) -> bool:
    """Whether ``origin`` is the page's own server: its host and port are the request's Host
    header (browsers leave a default port out of both). The scheme may differ, so a page
    behind a TLS-terminating proxy on the same name is its own too."""
    try:
        parsed = urlparse(origin.strip().lower())
    except ValueError:
        return False
    return parsed.scheme in ("http", "https") and bool(host) and \
        parsed.netloc == host.strip().lower()


def check_browser(request: Request, own: frozenset[str]) -> None:
    """Refuse (403 ``permission_denied``) a request whose Host or Origin the module's rules
    refuse; ``own`` is `machine_names()`."""
    server = state_of(request).config.server
    host = request.headers.get("host", "")
    conn = request.conn_info
    local = str(conn.server) if conn is not None and conn.server else ""
    if host and not host_allowed(host_name(host), server, own, local):
        raise errors.PermissionDenied(
            f"Host {host!r} is not a name of this server, so the request is refused (a "
            "foreign name is how DNS rebinding reaches a local server); list it in "
            "server.allowed_hosts, or \"*\" behind a reverse proxy that checks Host itself")
    origin = request.headers.get("origin")
    if origin is not None and not (origin_listed(origin, server.allowed_origins)
                                   or own_origin(origin, host)):
        raise errors.PermissionDenied(
            f"Requests from the web page at {origin!r} are refused: only loopback pages, "
            "this server's own and the origins in server.allowed_origins may call it")
