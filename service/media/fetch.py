"""Media content parts (``image_url``, ``input_audio``) as bytes, under the limits of spec
section 1: ``data:`` URLs and base64 always; http(s) URLs only with
``limits.allow_remote_image_urls``, capped at ``max_image_bytes`` while downloading.

Remote fetches refuse, unless ``limits.allow_private_urls``, a host with no public address
(loopback, private, link-local, unspecified, shared, reserved...), on every hop: redirects
are followed here, at most ``MAX_REDIRECTS``, each one resolved and checked again. The
connection goes to the address that was checked (the URL's host is sent as Host and as TLS
SNI), so a second DNS answer cannot swap in a private address between check and connect.
Every failure is an ``InvalidRequest`` (400) whose param names the part's field.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urljoin

import httpx

from hypnos.service.config.schema import LimitsConfig
from hypnos.service.errors import InvalidRequest

MAX_REDIRECTS = 5
#: The whole fetch, redirects included (a slow trickle is cut here, not per read).
FETCH_TIMEOUT_S = 20.0
_REDIRECTS = {301, 302, 303, 307, 308}

#: host, port -> the host's addresses (replaceable in tests; the default asks the system).
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def part_bytes(part: dict, where: str, limits: LimitsConfig) -> bytes:
    """The bytes of one ``image_url`` or ``input_audio`` content part. ``where`` names the
    part in errors (``messages[0].content[1]``). Awaits a download for a remote URL."""
    kind = part.get("type")
    if kind == "image_url":
        field = part.get("image_url")
        url = field.get("url") if isinstance(field, dict) else field
        param = f"{where}.image_url.url"
        if not isinstance(url, str) or not url:
            raise InvalidRequest("image_url.url must be a data: or http(s) URL", param=param)
        if url[:5].lower() == "data:":
            return _data_url(url, param, limits.max_image_bytes)
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme not in ("http", "https"):
            raise InvalidRequest(f"image_url.url must be a data: or http(s) URL, not "
                                 f"{scheme or 'a bare path'}", param=param)
        if not limits.allow_remote_image_urls:
            raise InvalidRequest("remote image URLs are disabled on this server "
                                 "(limits.allow_remote_image_urls); send a data: URL",
                                 param=param)
        data, _final = await fetch_url(url, param, max_bytes=limits.max_image_bytes,
                                       limit_name="limits.max_image_bytes",
                                       allow_private=limits.allow_private_urls)
        return data
    if kind == "input_audio":
        field = part.get("input_audio")
        data = field.get("data") if isinstance(field, dict) else None
        param = f"{where}.input_audio.data"
        if not isinstance(data, str) or not data:
            raise InvalidRequest("input_audio.data must be base64 audio", param=param)
        return _base64(data, param, limits.max_audio_bytes, "limits.max_audio_bytes")
    raise InvalidRequest(f"{where} is a {kind!r} part, not image_url or input_audio",
                         param=where)


# ------------------------------------------------------------------ base64 and data: URLs

def _data_url(url: str, param: str, max_bytes: int) -> bytes:
    meta, sep, payload = url[5:].partition(",")
    if not sep:
        raise InvalidRequest("the data: URL has no ',' before its payload", param=param)
    if not meta.lower().endswith(";base64"):
        raise InvalidRequest("the data: URL must be base64 (data:image/png;base64,...)",
                             param=param)
    return _base64(payload, param, max_bytes, "limits.max_image_bytes")


def _base64(text: str, param: str, max_bytes: int, limit_name: str) -> bytes:
    compact = "".join(text.split())                 # line-wrapped base64 is common
    if len(compact) // 4 * 3 > max_bytes + 2:       # refuse before decoding
        raise InvalidRequest(f"the media is larger than {max_bytes} bytes ({limit_name})",
                             param=param)
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"the media is not valid base64 ({exc})", param=param) from exc
    if not data:
        raise InvalidRequest("the media is empty", param=param)
    if len(data) > max_bytes:
        raise InvalidRequest(f"the media is larger than {max_bytes} bytes ({limit_name})",
                             param=param)
    return data


# ------------------------------------------------------------------ remote URLs

def is_public_address(ip: str) -> bool:
    """True for a globally routable unicast address (an IPv4-mapped IPv6 address is judged
    as the IPv4 address it carries)."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_global and not addr.is_multicast


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


async def fetch_url(url: str, param: str, *, max_bytes: int, limit_name: str,
                    allow_private: bool, timeout_s: float = FETCH_TIMEOUT_S,
                    resolve: Resolver = system_resolver,
                    is_public: Callable[[str], bool] = is_public_address) -> tuple[bytes, str]:
    """GET an http(s) URL, following up to MAX_REDIRECTS redirects, each hop's host checked
    (see the module doc), the body capped at ``max_bytes`` (``limit_name`` names that limit
    in the error: documents reuse this with theirs). Returns the body and the URL it came
    from after the redirects. Awaits the network, at most
    ``timeout_s`` in all; every failure is an InvalidRequest naming ``param``."""
    try:
        async with asyncio.timeout(timeout_s):
            async with httpx.AsyncClient(follow_redirects=False, trust_env=False,
                                         timeout=timeout_s) as client:
                for _hop in range(MAX_REDIRECTS + 1):
                    target = await _pinned(url, param, allow_private, resolve, is_public)
                    async with client.stream("GET", target.url, headers=target.headers,
                                             extensions=target.extensions) as resp:
                        location = resp.headers.get("location")
                        if resp.status_code in _REDIRECTS and location:
                            url = urljoin(url, location)
                            continue
                        if resp.status_code != 200:
                            raise InvalidRequest(f"fetching {_show(url)} answered HTTP "
                                                 f"{resp.status_code}", param=param)
                        return await _read_capped(resp, url, param, max_bytes, limit_name), url
                raise InvalidRequest(f"{_show(url)}: more than {MAX_REDIRECTS} redirects",
                                     param=param)
    except TimeoutError as exc:
        raise InvalidRequest(f"fetching {_show(url)} took longer than {timeout_s:g} s",
                             param=param) from exc
    except httpx.HTTPError as exc:
        raise InvalidRequest(f"fetching {_show(url)} failed: {exc.__class__.__name__}",
                             param=param) from exc


class _Target:
    """One hop's request: the URL with its host replaced by the checked address."""

    def __init__(self, url: httpx.URL, host_header: str, sni: str | None):
        self.url = url
        self.headers = {"host": host_header}
        self.extensions = {"sni_hostname": sni} if sni else {}


async def _pinned(url: str, param: str, allow_private: bool, resolve: Resolver,
                  is_public: Callable[[str], bool]) -> _Target:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidRequest(f"not a valid URL: {_show(url)}", param=param) from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidRequest(f"only http(s) URLs are fetched, not {_show(url)}", param=param)
    host = parsed.host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = await resolve(host, port)
    except OSError as exc:
        raise InvalidRequest(f"the host {host} does not resolve", param=param) from exc
    allowed = addresses if allow_private else [a for a in addresses if is_public(a)]
    if not allowed:
        raise InvalidRequest(f"the host {host} has no public address and this server does "
                             "not fetch from private ones (limits.allow_private_urls)",
                             param=param)
    sni = host if parsed.scheme == "https" else None
    return _Target(parsed.copy_with(host=allowed[0]), parsed.netloc.decode("ascii"), sni)


async def _read_capped(resp: httpx.Response, url: str, param: str, max_bytes: int,
                       limit_name: str) -> bytes:
    too_big = InvalidRequest(f"{_show(url)} is larger than {max_bytes} bytes ({limit_name})",
                             param=param)
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_big
    body = bytearray()
    async for piece in resp.aiter_bytes():
        body += piece
        if len(body) > max_bytes:
            raise too_big                      # stop reading; the connection is dropped
    if not body:
        raise InvalidRequest(f"{_show(url)} answered an empty body", param=param)
    return bytes(body)


def _show(url: str) -> str:
    """A URL for an error message: no query string or credentials, bounded length."""
    try:
        parsed = httpx.URL(url)
        port = f":{parsed.port}" if parsed.port else ""
        shown = f"{parsed.scheme}://{parsed.host}{port}"
        shown += parsed.path
    except (httpx.InvalidURL, TypeError):
        shown = url.split("?", 1)[0]
    return shown if len(shown) <= 200 else shown[:197] + "..."
