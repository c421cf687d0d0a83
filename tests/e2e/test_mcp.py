"""/mcp through the official MCP client (`mcp` package: streamable_http_client and
ClientSession) against a real `hypnos serve` on 127.0.0.1, with API keys and
server.mcp_file_roots configured, on the lineup's real models plus a tiny GLiNER (its heads
untrained: the entity test checks structure only, as tests/engines/test_entities.py does).

Every tool is called with real output: the server's own speech transcribed back to its
words, a generated PDF converted with its text, `embed` equal to /v1/embeddings, an answer
from ask_model, entities whose offsets slice their text. Keys (401), a browser's Origin
(403) and the file roots (outside, "..", a symlink pointing out) are refused.
"""
import asyncio
import base64
import io
import os
import re
import shutil
import sys

import httpx
import numpy as np
import pytest

from conftest import LINEUP_BLOCKS, MODELS_DIR, ROOT, require_smollm2

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]

ADMIN = "sk-mcp-admin"
USER = "sk-mcp-user"
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."


def link_tree(src, dst):
    """``src`` (a file or folder of the models folder) at ``dst``: hard links, or copies
    across file systems."""
    if src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        return
    for path in src.rglob("*"):
        if path.is_file():
            link_tree(path, dst / path.relative_to(src))


def make_pdf() -> bytes:
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=letter)
    c.drawString(72, 720, "Lighthouses guide ships along the rocky northern coast.")
    c.showPage()
    c.drawString(72, 720, "Harbours shelter fishing boats during winter storms.")
    c.showPage()
    c.save()
    return buf.getvalue()


def block(model_id: str, modality: str, **keys) -> str:
    import json
    keys = {"id": model_id, "modality": modality, **keys}
    return "[[models]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from test_entities import build_tiny_gliner
    require_smollm2()
    tmp = tmp_path_factory.mktemp("mcp")
    models = tmp / "models"
    for folder in ("smollm2-135m", "minilm-l6-v2", "whisper-tiny.en", "kokoro-82m"):
        link_tree(MODELS_DIR / folder, models / folder)
    build_tiny_gliner(models / "gliner-minilm")
    roots = tmp / "shared"
    (roots / "inside").mkdir(parents=True)
    outside = tmp / "secret"
    outside.mkdir()
    (outside / "doc.pdf").write_bytes(make_pdf())
    (roots / "inside" / "doc.pdf").write_bytes(make_pdf())
    os.symlink(outside / "doc.pdf", roots / "inside" / "escape.pdf")
    config = (f'models_dir = "{models}"\n[server]\napi_keys = ["{ADMIN}"]\n'
              f'mcp_file_roots = ["{roots}"]\n'
              f'[[server.keys]]\nlabel = "agent"\nkey = "{USER}"\n'
              + block("chat", "text_generation", **LINEUP_BLOCKS["text_generation"])
              + block("minilm", "embeddings", **LINEUP_BLOCKS["embeddings"])
              + block("whisper", "speech_to_text", **LINEUP_BLOCKS["speech_to_text"])
              + block("kokoro", "text_to_speech", **LINEUP_BLOCKS["text_to_speech"])
              + block("docling", "document_conversion", engine="docling")
              + block("ner", "entity_extraction", engine="gliner",
                      weights_path="gliner-minilm/"))
    (tmp / "hypnos.toml").write_text(config)
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=180,
                        env={"HYPNOS_MODELS_DIR": str(models)})
    srv.roots, srv.outside = roots, outside
    yield srv
    srv.stop()


async def session_calls(url: str, key: str | None, script):
    """Run ``script(session)`` in an initialized official-client session on ``url``."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=600) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        return await script(session)


def run(server, script, key=USER):
    return asyncio.run(session_calls(server.base + "/mcp", key, script))


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def test_tools_are_listed_with_the_models_that_serve_them(server):
    async def script(s):
        return (await s.list_tools()).tools

    async def together():
        # The first requests of the server, at once: they wait for the same SDK start.
        url = server.base + "/mcp"
        return await asyncio.gather(*(session_calls(url, USER, script) for _ in range(3)))
    first, *others = asyncio.run(together())
    assert all([t.name for t in o] == [t.name for t in first] for o in others)
    tools = {t.name: t for t in first}
    assert set(tools) == {"transcribe_audio", "synthesize_speech", "convert_document",
                          "extract_entities", "embed", "rerank", "ask_model"}, set(tools)
    # No image model here: that tool is not offered at all. The chat model ranks.
    serves = {"transcribe_audio": "whisper", "synthesize_speech": "kokoro",
              "convert_document": "docling", "extract_entities": "ner", "embed": "minilm",
              "rerank": "chat", "ask_model": "chat"}
    for name, model in serves.items():
        assert tools[name].input_schema["properties"]["model"]["enum"] == [model]
        assert model in tools[name].description


def test_speech_is_heard_back_by_transcription(server):
    async def script(s):
        spoken = await s.call_tool("synthesize_speech", {"text": SENTENCE})
        audio = next(c for c in spoken.content if c.type == "audio")
        heard = await s.call_tool("transcribe_audio", {"audio_base64": audio.data,
                                                       "filename": "speech.wav"})
        return spoken, audio, heard
    spoken, audio, heard = run(server, script)
    assert not spoken.is_error and audio.mime_type == "audio/wav"
    wav = base64.b64decode(audio.data)
    assert wav[:4] == b"RIFF" and len(wav) > 24000
    assert not heard.is_error, heard.content
    said, got = words(SENTENCE), words(heard.content[0].text)
    assert len(said & got) >= 0.6 * len(said), heard.content[0].text
    assert heard.structured_content["duration_secs"] > 1


def test_a_pdf_is_converted_with_its_text(server):
    async def script(s):
        return await s.call_tool("convert_document", {
            "file_base64": base64.b64encode(make_pdf()).decode(), "filename": "doc.pdf"})
    result = run(server, script)
    assert not result.is_error, result.content
    markdown = result.content[0].text
    assert "Lighthouses guide ships" in markdown and "Harbours shelter" in markdown
    assert result.structured_content["page_count"] == 2


def test_embed_equals_the_embeddings_route(server):
    texts = ["a cat sat on the mat", "quarterly revenue grew"]

    async def script(s):
        return await s.call_tool("embed", {"input": texts, "model": "minilm"})
    result = run(server, script)
    assert not result.is_error, result.content
    tool = [d["embedding"] for d in result.structured_content["data"]]
    http = httpx.post(server.base + "/v1/embeddings", json={"model": "minilm", "input": texts},
                      headers={"Authorization": f"Bearer {USER}"}, timeout=120).json()
    route = [d["embedding"] for d in http["data"]]
    assert len(tool) == 2 and len(tool[0]) == 384
    assert np.allclose(tool, route, atol=1e-6)


def test_rerank_equals_the_rerank_route(server):
    """The tool ranks with POST /v1/rerank's own scorer: the same order and scores."""
    query = "Which animal barks?"
    documents = ["Dogs bark at strangers.", "The stock market closed higher today."]

    async def script(s):
        return await s.call_tool("rerank", {"model": "chat", "query": query,
                                            "documents": documents})
    result = run(server, script)
    assert not result.is_error, result.content
    tool = [(r["index"], r["relevance_score"]) for r in result.structured_content["results"]]
    http = httpx.post(server.base + "/v1/rerank", timeout=300,
                      json={"model": "chat", "query": query, "documents": documents},
                      headers={"Authorization": f"Bearer {USER}"}).json()
    route = [(r["index"], r["relevance_score"]) for r in http["results"]]
    assert sorted(i for i, _ in tool) == [0, 1]
    assert [i for i, _ in tool] == [i for i, _ in route]
    assert np.allclose([v for _, v in tool], [v for _, v in route], atol=1e-4)


def test_ask_model_answers_with_text(server):
    async def script(s):
        return await s.call_tool("ask_model", {"prompt": "Name a colour.", "max_tokens": 12})
    result = run(server, script)
    assert not result.is_error, result.content
    assert result.content[0].text.strip()
    assert result.structured_content["usage"]["completion_tokens"] >= 1


def test_extract_entities_returns_spans_of_the_text(server):
    text = "Ada Lovelace worked with Charles Babbage in London."

    async def script(s):
        return await s.call_tool("extract_entities", {"input": text, "threshold": 0.0,
                                                      "labels": ["person", "city"]})
    result = run(server, script)
    assert not result.is_error, result.content
    data = result.structured_content["data"]
    assert [d["index"] for d in data] == [0] and data[0]["entities"]
    for e in data[0]["entities"]:
        assert text[e["start"]:e["end"]] == e["text"] and e["label"] in ("person", "city")


def test_resources_list_the_pool_and_its_tiers(server):
    async def script(s):
        listed = await s.list_resources()
        pool = await s.read_resource("hypnos://models")
        return listed, pool
    listed, pool = run(server, script)
    uris = {str(r.uri) for r in listed.resources}
    assert "hypnos://models" in uris and "hypnos://models/whisper" in uris
    import json
    models = {m["id"]: m for m in json.loads(pool.contents[0].text)["models"]}
    assert models["whisper"]["tools"] == ["transcribe_audio"]
    assert models["whisper"]["tier"].startswith("tier")


def test_files_are_read_only_under_the_roots(server):
    inside = str(server.roots / "inside" / "doc.pdf")
    attempts = {"outside": str(server.outside / "doc.pdf"),
                "dotdot": str(server.roots / "inside" / ".." / ".." / "secret" / "doc.pdf"),
                "symlink": str(server.roots / "inside" / "escape.pdf")}

    async def script(s):
        ok = await s.call_tool("convert_document", {"path": inside})
        refused = {k: await s.call_tool("convert_document", {"path": p})
                   for k, p in attempts.items()}
        return ok, refused
    ok, refused = run(server, script)
    assert not ok.is_error and "Lighthouses" in ok.content[0].text
    for kind, result in refused.items():
        assert result.is_error, kind
        assert "Lighthouses" not in result.content[0].text
    assert "outside server.mcp_file_roots" in refused["outside"].content[0].text
    assert "outside server.mcp_file_roots" in refused["symlink"].content[0].text
    assert "'..'" in refused["dotdot"].content[0].text


def test_a_tool_without_a_model_refuses_as_a_tool_error(server):
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert httpx.post(server.base + "/v1/models/minilm/disable", headers=admin,
                      timeout=60).status_code == 200
    try:
        async def script(s):
            tools = {t.name: t for t in (await s.list_tools()).tools}
            return tools["embed"], await s.call_tool("embed", {"input": "hello"})
        tool, result = run(server, script)
    finally:
        httpx.post(server.base + "/v1/models/minilm/enable", headers=admin, timeout=60)
    assert "enum" not in tool.input_schema["properties"]["model"]
    assert result.is_error and "No model" in result.content[0].text


def test_keys_and_browser_origins_are_enforced(server):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"accept": "application/json, text/event-stream"}
    bare = httpx.post(server.base + "/mcp", json=body, headers=accept, timeout=30)
    assert bare.status_code == 401 and "Bearer" in bare.headers["www-authenticate"]
    wrong = httpx.post(server.base + "/mcp", json=body, timeout=30,
                       headers={**accept, "Authorization": "Bearer sk-not-a-key"})
    assert wrong.status_code == 401
    page = httpx.post(server.base + "/mcp", json=body, timeout=30, headers={
        **accept, "Authorization": f"Bearer {USER}", "Origin": "https://evil.example"})
    assert page.status_code == 403
    from mcp.shared.exceptions import MCPError
    # The official client fails to connect (its error may come inside a task group's).
    with pytest.raises((MCPError, BaseExceptionGroup)):
        run(server, lambda s: s.list_tools(), key=None)
    keyed = httpx.post(server.base + "/mcp", json=body, timeout=30,
                       headers={**accept, "Authorization": f"Bearer {USER}"})
    assert keyed.status_code == 200 and keyed.json()["result"]["tools"]
