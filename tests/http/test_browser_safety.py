"""Browser safety on every route (service/http/browser.py), through Sanic's ASGI client and, for
WebSocket upgrades, a real Sanic server in this event loop: a foreign Origin or Host is a 403
in the route's envelope before any work; loopback pages, the server's own page, listed
origins and hosts, and requests without an Origin pass. And the body parser refuses JSON's
non-numbers (NaN, Infinity) with a 400 naming them."""
import json
import socket
from contextlib import asynccontextmanager

import pytest
from sanic import Sanic
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from test_http import app_for, assert_envelope, call, config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

EVIL = "http://evil.example"
LIVE = "/v1/audio/stream"
CHAT = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}


def refused_origin(resp, origin: str = EVIL) -> str:
    """The 403's message, in the route's envelope (Ollama's on /api/*)."""
    assert resp.status == 403, resp.text
    body = resp.json
    message = body["error"] if isinstance(body["error"], str) else \
        assert_envelope(resp, 403, "permission_denied")["message"]
    assert "access-control-allow-origin" not in resp.headers
    return message


async def model_ids(app) -> list[str]:
    return [m["id"] for m in (await call(app, "get", "/v1/models")).json["data"]]


async def test_a_foreign_origin_is_refused_before_any_work_whatever_the_content_type():
    app = app_for()
    before = await model_ids(app)
    message = refused_origin(await call(app, "get", "/v1/models", headers={"origin": EVIL}))
    assert EVIL in message and "server.allowed_origins" in message
    # CORS-simple requests: no preflight, a body the route would otherwise read.
    simple = {"origin": EVIL, "content-type": "text/plain"}
    resp = await call(app, "post", "/api/pull", headers=simple,
                      content=json.dumps({"model": "smollm2:135m", "stream": False}))
    assert set(resp.json) == {"error"} and EVIL in refused_origin(resp)
    resp = await call(app, "post", "/v1/chat/completions", headers=simple,
                      content=json.dumps(CHAT))
    refused_origin(resp)           # a 404 for the unknown model had the body been read
    resp = await call(app, "options", "/v1/chat/completions", headers={
        "origin": EVIL, "access-control-request-method": "POST"})
    refused_origin(resp)
    resp = await call(app, "get", "/health", headers={"origin": "null"})
    assert "'null'" in refused_origin(resp, "null")
    assert await model_ids(app) == before


async def test_loopback_listed_and_own_origins_pass():
    app = app_for(config('[server]\nallowed_origins = ["http://lab.example:*", "null"]\n'
                         'allowed_hosts = ["box.lan"]\n'))
    for origin in ("http://localhost:5173", "https://127.0.0.1", "http://[::1]:8080",
                   "http://app.localhost:3000", "http://127.0.0.2:1", "http://lab.example",
                   "http://lab.example:8080", "null"):
        resp = await call(app, "get", "/v1/models", headers={"origin": origin})
        assert resp.status == 200, (origin, resp.text)
    # The playground opened on a LAN name: its page's origin is the request's own Host.
    own = {"host": "box.lan:9999", "origin": "http://box.lan:9999"}
    assert (await call(app, "get", "/v1/models", headers=own)).status == 200
    resp = await call(app, "post", "/v1/chat/completions", headers=own, json=CHAT)
    assert_envelope(resp, 404, "model_not_found")
    for origin in ("http://box.lan:8080", "http://lab.example.evil.example", EVIL):
        resp = await call(app, "get", "/v1/models", headers={"host": "box.lan:9999",
                                                             "origin": origin})
        refused_origin(resp, origin)
    star = app_for(config('[server]\nallowed_origins = ["*"]\n'))
    assert (await call(star, "get", "/v1/models", headers={"origin": EVIL})).status == 200
    refused_origin(await call(star, "get", "/v1/models", headers={"origin": "null"}), "null")


async def test_a_foreign_host_is_refused_and_allowed_hosts_lets_it_in():
    app = app_for()
    before = await model_ids(app)
    rebound = {"host": "evil.example:9999"}
    _req, resp = await app.asgi_client.request("DELETE", "/api/delete", headers=rebound,
                                               json={"model": "chat"})
    message = resp.json["error"]
    assert resp.status == 403 and "'evil.example:9999'" in message
    assert "server.allowed_hosts" in message
    assert_envelope(await call(app, "get", "/health", headers=rebound), 403,
                    "permission_denied")
    assert await model_ids(app) == before
    for host in ("localhost:9999", "127.0.0.1", "[::1]:9999", "api.localhost", "127.8.0.1:1"):
        assert (await call(app, "get", "/v1/models", headers={"host": host})).status == 200
    for extra in ('[server]\nallowed_hosts = ["*"]\n',
                  '[server]\nallowed_hosts = ["Evil.Example."]\n',
                  '[server]\nhost = "evil.example"\n'):
        assert (await call(app_for(config(extra)), "get", "/v1/models",
                           headers=rebound)).status == 200, extra


async def test_no_origin_works_as_before_even_with_a_form_content_type():
    """curl and the SDKs send no Origin; Ollama documents `curl -d '{...}'`, whose body goes
    out as a form. Both reach the route (a 404 for the unknown model, not a 403)."""
    app = app_for()
    resp = await call(app, "post", "/v1/chat/completions", content=json.dumps(CHAT),
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert_envelope(resp, 404, "model_not_found")
    resp = await call(app, "post", "/api/show", content=json.dumps({"model": "nope"}),
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert resp.status == 404 and set(resp.json) == {"error"}


@pytest.mark.parametrize("path,body,literal", [
    ("/v1/chat/completions", '{"model": "chat", "messages": [], "temperature": NaN}', "NaN"),
    ("/v1/embeddings", '{"model": "chat", "input": "x", "dimensions": -Infinity}',
     "-Infinity"),
    ("/api/generate", '{"model": "chat", "prompt": "x", "keep_alive": Infinity}', "Infinity"),
    ("/api/chat", '{"model": "chat", "messages": [], "keep_alive": 1e400}', "1e400"),
])
async def test_json_non_numbers_are_a_400_naming_them(path, body, literal):
    resp = await call(app_for(), "post", path, content=body)
    assert resp.status == 400, resp.text
    err = resp.json["error"]
    message = err if isinstance(err, str) else err["message"]
    assert literal in message, message


# ---------------------------------------------------------------- WebSocket upgrades


@asynccontextmanager
async def live_port(cfg):
    """A real Sanic server in this event loop: WebSocket upgrades take the native path."""
    app = app_for(cfg)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = await app.create_server(host="127.0.0.1", port=port, return_asyncio_server=True)
    await srv.startup()
    await srv.before_start()
    await srv.after_start()
    try:
        yield port
    finally:
        await srv.before_stop()
        srv.close()
        await srv.wait_closed()
        await srv.after_stop()


async def test_a_websocket_upgrade_is_refused_before_the_handshake():
    async with live_port(config()) as port:
        # A rebound page's socket: its URL names the foreign site, it reaches this port.
        for url, headers, named in (
                (f"ws://127.0.0.1:{port}{LIVE}", {"Origin": EVIL}, EVIL),
                (f"ws://evil.example:{port}{LIVE}", {}, "evil.example")):
            with pytest.raises(InvalidStatus) as caught:
                async with connect(url, additional_headers=headers, host="127.0.0.1",
                                   port=port):
                    pass
            response = caught.value.response
            assert response.status_code == 403
            assert named in json.loads(response.body)["error"]["message"]
        async with connect(f"ws://localhost:{port}{LIVE}", host="127.0.0.1", port=port,
                           additional_headers={"Origin": "http://localhost:3000"}) as ws:
            await ws.send('{"model": "chat", "sample_rate": NaN}')
            frame = json.loads(await ws.recv())
        assert frame["type"] == "error" and "NaN" in frame["message"], frame
