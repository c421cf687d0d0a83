"""POST /mcp through Sanic's ASGI client, model-free: the JSON-RPC exchange the SDK answers
behind the route, which tools are offered, tool errors for calls no model can serve, the
rerank tool behind its `Ranker` (a scripted one here), keys and bare HTTP refusals.
tests/e2e/test_mcp.py drives the real models with the official client."""
import pytest
from sanic import Sanic

from test_http import app_for, call, config
from hypnos.service.routes import mcp as mcp_route

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

WHISPER = """
[[models]]
id = "whisper"
modality = "speech_to_text"
engine = "faster_whisper"
weights_path = "whisper-tiny.en"
"""
ACCEPT = {"accept": "application/json, text/event-stream"}


async def rpc(app, method, params=None, headers=None):
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params or {}}
    return await call(app, "post", "/mcp", json=body, headers={**ACCEPT, **(headers or {})})


class ScriptedRanker:
    """Scores each document by how many of the query's words it holds."""

    def __init__(self):
        self.calls = []

    def models(self, ctx):
        return ["chat"]

    async def rank(self, ctx, model, query, documents):
        self.calls.append((model, query, documents))
        terms = set(query.split())
        return [(i, len(terms & set(d.split())) / len(terms)) for i, d in enumerate(documents)]


async def test_tools_list_without_models_and_a_call_refused_as_a_tool_error(monkeypatch):
    monkeypatch.setattr(mcp_route, "RANKER", None)
    app = app_for()
    resp = await rpc(app, "tools/list")
    assert resp.status == 200 and resp.json["id"] == 7
    tools = {t["name"]: t for t in resp.json["result"]["tools"]}
    # The image tool needs an image model and rerank a scorer: neither is offered here.
    assert set(tools) == {"transcribe_audio", "synthesize_speech", "convert_document",
                          "extract_entities", "embed", "ask_model"}
    assert "No model" in tools["embed"]["description"]     # its one model is disabled
    assert "enum" not in tools["embed"]["inputSchema"]["properties"]["model"]
    assert "chat" in tools["ask_model"]["inputSchema"]["properties"]["model"]["enum"]
    resp = await rpc(app, "tools/call", {"name": "embed", "arguments": {"input": "hi"}})
    result = resp.json["result"]
    assert result["isError"] and "No model" in result["content"][0]["text"]


@pytest.mark.parametrize("arguments, says", [
    ({}, "Send exactly one of 'audio_base64' or 'path'"),
    ({"audio_base64": "UklG", "path": "/x.wav"}, "exactly one of"),
    ({"audio_base64": "not base64!"}, "not valid base64"),
    ({"path": "/etc/passwd"}, "reads no files by path"),
    ({"audio_base64": "UklG", "volume": 3}, "takes no argument 'volume'"),
    ({"audio_base64": "UklG", "model": "chat"}, "cannot serve transcribe_audio"),
])
async def test_bad_arguments_are_tool_errors_naming_the_problem(arguments, says):
    # A transcription model that is never loaded: every call here is refused before a lease.
    app = app_for(config(WHISPER))
    resp = await rpc(app, "tools/call", {"name": "transcribe_audio", "arguments": arguments})
    result = resp.json["result"]
    assert result["isError"] and says in result["content"][0]["text"], result


async def test_rerank_is_offered_and_called_through_its_ranker(monkeypatch):
    ranker = ScriptedRanker()
    monkeypatch.setattr(mcp_route, "RANKER", ranker)
    app = app_for()
    tools = {t["name"]: t for t in (await rpc(app, "tools/list")).json["result"]["tools"]}
    assert tools["rerank"]["inputSchema"]["properties"]["model"]["enum"] == ["chat"]
    docs = ["red apples", "green pears and red apples", "blue sky"]
    resp = await rpc(app, "tools/call", {"name": "rerank", "arguments": {
        "query": "red apples", "documents": docs, "top_n": 2}})
    result = resp.json["result"]
    assert not result["isError"], result
    assert [r["index"] for r in result["structuredContent"]["results"]] in ([0, 1], [1, 0])
    assert ranker.calls == [("chat", "red apples", docs)]
    resp = await rpc(app, "tools/call", {"name": "rerank", "arguments": {
        "query": "x", "documents": docs, "top_n": 4}})
    assert resp.json["result"]["isError"]


async def test_resources_name_each_model_and_its_tier():
    """A chat model serves ask_model and, by its judgement, rerank."""
    app = app_for()
    listed = (await rpc(app, "resources/list")).json["result"]["resources"]
    assert {r["uri"] for r in listed} >= {"hypnos://models", "hypnos://models/chat"}
    read = (await rpc(app, "resources/read", {"uri": "hypnos://models/chat"})).json["result"]
    import json
    entry = json.loads(read["contents"][0]["text"])
    assert entry["tools"] == ["ask_model", "rerank"] and entry["tier"] == "tier3_nvme_ssd"
    missing = (await rpc(app, "resources/read", {"uri": "hypnos://models/nope"})).json
    assert "error" in missing


async def test_keys_and_bare_http_refusals():
    app = app_for(config('[server]\napi_keys = ["sk-a"]\n'))
    resp = await rpc(app, "tools/list")
    assert resp.status == 401 and resp.json["error"]["code"] == "invalid_api_key"
    resp = await rpc(app, "tools/list", headers={"authorization": "Bearer sk-a"})
    assert resp.status == 200 and resp.json["result"]["tools"]
    # No Accept the protocol needs: the SDK's refusal in the error envelope.
    resp = await call(app, "post", "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                      headers={"authorization": "Bearer sk-a", "accept": "text/html"})
    assert resp.status == 406 and resp.json["error"]["message"], resp.text
    resp = await call(app, "post", "/mcp", content="{nope", headers={
        **ACCEPT, "authorization": "Bearer sk-a", "content-type": "application/json"})
    assert resp.status == 400 and resp.json["error"]["code"] == -32700     # JSON-RPC's own


async def test_without_the_sdk_mcp_is_a_503_and_the_rest_serves(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "hypnos.service.mcp.server", None)    # import fails
    app = app_for()
    resp = await rpc(app, "tools/list")
    assert resp.status == 503 and "pip install" in resp.json["error"]["message"]
    assert (await call(app, "get", "/v1/models")).status == 200


async def test_the_2026_protocol_era_is_served_too():
    """A client of the per-request era (MCP-Protocol-Version 2026-07-28, no handshake)."""
    app = app_for()
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}
    resp = await rpc(app, "tools/list", {"_meta": meta}, headers=headers)
    assert resp.status == 200, resp.text
    assert "embed" in {t["name"] for t in resp.json["result"]["tools"]}


async def test_the_asgi_bridge_returns_whole_streams_and_wraps_bare_refusals():
    from sanic import Sanic as S
    from sanic_testing.testing import SanicASGITestClient
    from hypnos.service.http.asgi import serve_asgi
    toy = S("asgi-toy")

    async def chunks(scope, receive, send):
        assert (await receive())["body"] == b"ping" and scope["toy"] == 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        for part in (b"a", b"b"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"c", "more_body": False})

    async def bare(scope, receive, send):
        await send({"type": "http.response.start", "status": 406, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @toy.post("/stream")
    async def stream(request):
        return await serve_asgi(request, chunks, {"toy": 1}, label="Toy")

    @toy.post("/bare")
    async def refused(request):
        return await serve_asgi(request, bare, {}, label="Toy")

    client = SanicASGITestClient(toy)
    _req, resp = await client.post("/stream", content=b"ping")
    assert resp.status == 200 and resp.text == "abc"
    _req, resp = await client.post("/bare", content=b"")
    assert resp.status == 406 and resp.json["error"] == {
        "message": "Toy: Not acceptable", "type": "invalid_request_error"}
