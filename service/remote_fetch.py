"""Fetching a remote http(s) URL for a request (spec section 1): only when
``limits.allow_remote_image_urls``; unless ``limits.allow_private_urls``, a host that
resolves only to loopback, private, link-local or other non-public addresses is refused,
after every redirect too. The body is capped at ``max_bytes`` while it streams in. Every
refusal is a 400 naming the field and, where it applies, the host.

The address check resolves the name itself, before httpx connects (which resolves again):
it keeps honest mistakes and plain private hosts out, not a DNS server that answers
differently the second time.
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
from pathlib import PurePosixPath
from urllib.parse import unquote, urljoin, urlparse

import httpx

from hypnos.service import errors

MAX_REDIRECTS = 5
TIMEOUT_SECS = 30.0


async def _check_host(host: str, param: str) -> None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None)
    except socket.gaierror as exc:
        raise errors.InvalidRequest(f"The host {host} in '{param}' cannot be resolved: {exc}",
                                    param=param) from None
    addresses = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos}
    if not any(a.is_global for a in addresses):
        raise errors.InvalidRequest(
            f"The host {host} in '{param}' resolves only to non-public addresses; the server "
            "does not fetch those (limits.allow_private_urls)", param=param)


def _checked_url(url: str, param: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise errors.InvalidRequest(f"'{param}' must be an http(s) URL, got {url!r}",
                                    param=param)
    return parsed.hostname


async def fetch_url(url: str, limits, max_bytes: int, param: str = "url",
                    limit_name: str = "max_document_bytes") -> tuple[bytes, str]:
    """The body at ``url`` and the file name its path ends with. Raises a 400."""
    if not limits.allow_remote_image_urls:
        raise errors.InvalidRequest(f"This server does not fetch remote URLs "
                                    f"(limits.allow_remote_image_urls); upload the file "
                                    f"instead of '{param}'", param=param)
    async with httpx.AsyncClient(timeout=TIMEOUT_SECS, follow_redirects=False) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            host = _checked_url(url, param)
            if not limits.allow_private_urls:
                await _check_host(host, param)
            try:
                async with client.stream("GET", url) as resp:
                    if resp.is_redirect:
                        url = urljoin(url, resp.headers.get("location", ""))
                        continue
                    if resp.status_code != 200:
                        raise errors.InvalidRequest(f"Fetching '{param}' answered HTTP "
                                                    f"{resp.status_code}", param=param)
                    body = bytearray()
                    async for chunk in resp.aiter_bytes():
                        body += chunk
                        if len(body) > max_bytes:
                            raise errors.InvalidRequest(f"The file at '{param}' is larger than "
                                                        f"{limit_name} ({max_bytes})",
                                                        param=param)
                    name = PurePosixPath(unquote(urlparse(url).path)).name
                    return bytes(body), name
            except httpx.HTTPError as exc:
                raise errors.InvalidRequest(f"Fetching '{param}' failed: {exc}",
                                            param=param) from None
    raise errors.InvalidRequest(f"'{param}' redirected more than {MAX_REDIRECTS} times",
                                param=param)
