"""service/media/fetch.py: content parts to bytes, against real local HTTP servers.

Two servers run for the module: "inner" on 127.0.0.1 (a private address, as the rule sees
it) and "outer" on 127.0.0.2, which the redirect tests treat as the public internet (an
injected address rule that accepts 127.0.0.2 and otherwise is the real one), so a redirect
from a public host to a private one can be followed hop by hop on one machine.
"""
from __future__ import annotations

import base64
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hypnos.service.config.schema import LimitsConfig
from hypnos.service.errors import InvalidRequest
from hypnos.service.media.fetch import (MAX_REDIRECTS, fetch_url, is_public_address, part_bytes,
                                        system_resolver)

pytestmark = pytest.mark.anyio

PAYLOAD = bytes(range(256)) * 16            # 4 KiB of "image"
WHERE = "messages[0].content[1]"
URL_PARAM = WHERE + ".image_url.url"
LIMITS = LimitsConfig()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    release = threading.Event()                 # set at teardown: frees /hang

    def do_GET(self):
        self.server.seen.append((self.path, self.headers.get("host")))
        path, _, query = self.path.partition("?")
        if path == "/img":
            self._send(200, PAYLOAD)
        elif path == "/redirect":
            self._send(302, b"", location=query.removeprefix("to="))
        elif path == "/relative":
            self._send(301, b"", location="/img")
        elif path == "/loop":
            self._send(307, b"", location="/loop")
        elif path == "/big-declared":
            self._send(200, b"x" * (len(PAYLOAD) + 1))
        elif path == "/big-chunked":
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            piece = b"y" * 1024
            try:
                for _ in range(64):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass                               # the client stopped reading: expected
        elif path == "/hang":
            Handler.release.wait(10)
            self._send(200, PAYLOAD)
        else:
            self._send(404, b"no")

    def _send(self, status: int, body: bytes, location: str | None = None):
        self.send_response(status)
        if location is not None:
            self.send_header("location", location)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


def _serve(host: str):
    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def servers():
    inner, outer = _serve("127.0.0.1"), _serve("127.0.0.2")
    yield (f"http://127.0.0.1:{inner.server_port}", inner,
           f"http://127.0.0.2:{outer.server_port}", outer)
    Handler.release.set()
    for server in (inner, outer):
        server.shutdown()
        server.server_close()


def _public_outer(ip: str) -> bool:
    """The real rule, except that 127.0.0.2 stands in for a public address."""
    return ip == "127.0.0.2" or is_public_address(ip)


async def _fetch(url: str, **kw) -> bytes:
    args = dict(max_bytes=len(PAYLOAD), limit_name="limits.max_image_bytes",
                allow_private=False, is_public=_public_outer)
    args.update(kw)
    return (await fetch_url(url, URL_PARAM, **args))[0]


def _image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


# ------------------------------------------------------------------ data: URLs and base64

async def test_data_url_is_decoded():
    url = "data:image/png;base64," + base64.b64encode(PAYLOAD).decode()
    assert await part_bytes(_image_part(url), WHERE, LIMITS) == PAYLOAD


async def test_line_wrapped_base64_is_accepted():
    text = base64.encodebytes(PAYLOAD).decode()        # newline every 76 characters
    assert "\n" in text
    assert await part_bytes(_image_part("data:image/png;base64," + text), WHERE,
                            LIMITS) == PAYLOAD


@pytest.mark.parametrize("url, message", [
    ("data:image/png;base64,iVBORw0K!!!", "not valid base64"),
    ("data:image/png;base64,abc", "not valid base64"),          # bad padding
    ("data:image/png,rawbytes", "must be base64"),
    ("data:image/png;base64", "no ','"),
    ("data:image/png;base64,", "empty"),
    ("file:///etc/passwd", "not file"),
    ("ftp://example.com/a.png", "not ftp"),
    ("/tmp/a.png", "bare path"),
    ("", "must be a data: or http(s) URL"),
])
async def test_bad_image_urls_are_400_naming_the_part(url, message):
    with pytest.raises(InvalidRequest) as err:
        await part_bytes(_image_part(url), WHERE, LIMITS)
    assert err.value.status == 400 and err.value.param == URL_PARAM
    assert message in err.value.message


async def test_oversized_data_url_is_refused():
    url = "data:image/png;base64," + base64.b64encode(PAYLOAD).decode()
    limits = replace(LIMITS, max_image_bytes=len(PAYLOAD) - 1)
    with pytest.raises(InvalidRequest, match="limits.max_image_bytes"):
        await part_bytes(_image_part(url), WHERE, limits)


async def test_input_audio_is_decoded_and_limited_by_max_audio_bytes():
    part = {"type": "input_audio",
            "input_audio": {"data": base64.b64encode(PAYLOAD).decode(), "format": "wav"}}
    assert await part_bytes(part, WHERE, LIMITS) == PAYLOAD
    with pytest.raises(InvalidRequest, match="limits.max_audio_bytes") as err:
        await part_bytes(part, WHERE, replace(LIMITS, max_audio_bytes=100))
    assert err.value.param == WHERE + ".input_audio.data"
    with pytest.raises(InvalidRequest, match="base64"):
        await part_bytes({"type": "input_audio", "input_audio": {"data": "%%%"}}, WHERE,
                         LIMITS)
    with pytest.raises(InvalidRequest, match="must be base64 audio"):
        await part_bytes({"type": "input_audio", "input_audio": "x"}, WHERE, LIMITS)


async def test_a_text_part_is_not_media():
    with pytest.raises(InvalidRequest, match="not image_url or input_audio"):
        await part_bytes({"type": "text", "text": "hi"}, WHERE, LIMITS)


# ------------------------------------------------------------------ remote URLs

async def test_remote_urls_can_be_disabled(servers):
    inner_url = servers[0]
    limits = replace(LIMITS, allow_remote_image_urls=False, allow_private_urls=True)
    with pytest.raises(InvalidRequest, match="allow_remote_image_urls"):
        await part_bytes(_image_part(inner_url + "/img"), WHERE, limits)


async def test_loopback_is_refused_by_default_and_fetched_when_allowed(servers):
    inner_url = servers[0]
    with pytest.raises(InvalidRequest, match="127.0.0.1 has no public address") as err:
        await part_bytes(_image_part(inner_url + "/img"), WHERE, LIMITS)
    assert err.value.param == URL_PARAM
    allowed = replace(LIMITS, allow_private_urls=True)
    assert await part_bytes(_image_part(inner_url + "/img"), WHERE, allowed) == PAYLOAD


async def test_a_name_resolving_to_loopback_is_refused(servers):
    port = servers[1].server_port
    with pytest.raises(InvalidRequest, match="host localhost has no public address"):
        await part_bytes(_image_part(f"http://localhost:{port}/img"), WHERE, LIMITS)


async def test_a_redirect_to_loopback_is_refused_at_that_hop(servers):
    inner_url, inner, outer_url, outer = servers
    url = f"{outer_url}/redirect?to={inner_url}/img"
    before = len(inner.seen)
    with pytest.raises(InvalidRequest, match="127.0.0.1 has no public address"):
        await _fetch(url)
    assert ("/redirect?to=" + inner_url + "/img", outer_url[7:]) in outer.seen
    assert len(inner.seen) == before                     # never contacted
    assert await _fetch(url, allow_private=True) == PAYLOAD
    assert inner.seen[-1][0] == "/img"


async def test_relative_redirects_and_the_redirect_cap(servers):
    outer_url = servers[2]
    assert await _fetch(outer_url + "/relative") == PAYLOAD
    with pytest.raises(InvalidRequest, match=f"more than {MAX_REDIRECTS} redirects"):
        await _fetch(outer_url + "/loop")


async def test_a_redirect_to_another_scheme_is_refused(servers):
    outer_url = servers[2]
    with pytest.raises(InvalidRequest, match="only http"):
        await _fetch(outer_url + "/redirect?to=file:///etc/passwd")


@pytest.mark.parametrize("path", ["/big-declared", "/big-chunked"])
async def test_an_oversized_download_is_cut(servers, path):
    outer_url = servers[2]
    with pytest.raises(InvalidRequest, match="larger than 4096 bytes"):
        await _fetch(outer_url + path)


async def test_an_error_status_is_a_400(servers):
    with pytest.raises(InvalidRequest, match="answered HTTP 404"):
        await _fetch(servers[2] + "/missing")


async def test_a_hanging_server_times_out(servers):
    with pytest.raises(InvalidRequest, match="took longer than 0.3 s"):
        await _fetch(servers[2] + "/hang", timeout_s=0.3)


async def test_the_connection_goes_to_the_checked_address(servers):
    """The URL's host is resolved once, checked, and connected to; the server still sees
    the original host name."""
    inner = servers[1]

    async def resolve(host, port):
        return ["127.0.0.1"] if host == "images.test" else await system_resolver(host, port)

    url = f"http://images.test:{inner.server_port}/img"
    assert await _fetch(url, allow_private=True, resolve=resolve) == PAYLOAD
    assert inner.seen[-1] == ("/img", f"images.test:{inner.server_port}")


async def test_an_unknown_host_is_a_400():
    with pytest.raises(InvalidRequest, match="does not resolve"):
        await _fetch("http://no-such-host.invalid/img")


@pytest.mark.parametrize("ip, public", [
    ("8.8.8.8", True), ("2606:4700:4700::1111", True),
    ("127.0.0.1", False), ("10.1.2.3", False), ("172.16.0.1", False),
    ("192.168.1.1", False), ("169.254.169.254", False), ("0.0.0.0", False),
    ("100.64.0.1", False), ("::1", False), ("::", False), ("fe80::1%eth0", False),
    ("fd00::1", False), ("::ffff:127.0.0.1", False), ("::ffff:8.8.8.8", True),
    ("224.0.0.1", False),
])
def test_public_addresses(ip, public):
    assert is_public_address(ip) is public
