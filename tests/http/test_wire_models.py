"""The request bodies are declared once (service/wire/model.py): the schema /openapi.json
publishes for a JSON body is the one its pydantic model emits, and the document and the server
agree on the bodies schemathesis (``--checks all``) found them disagreeing on: either the
published schema refuses the body, or the server takes it (no 400)."""
import re

import pytest
from jsonschema import Draft202012Validator
from sanic import Sanic

from test_http import app_for, call
from hypnos.service.http.openapi import endpoint_of
from hypnos.service.wire.model import body_schema

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

TOOL_CALL = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
# (method, path, body): the schemathesis examples, then neighbours of theirs.
EXAMPLES = [
    ("post", "/v1/chat/completions", {"messages": [{"role": "tool"}], "model": "0"}),
    ("post", "/v1/models", {}),
    ("post", "/v1/memory/kv-park", {}),
    ("post", "/v1/documents/convert", {"model": ""}),
    ("post", "/v1/entities", {"model": ""}),
    ("post", "/v1/images/generations", {"model": ""}),
    ("post", "/v1/advisor", {"needs": [""]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [{"role": "assistant"}]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "assistant", "tool_calls": []}]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "user", "content": "x", "tool_calls": TOOL_CALL}]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "user", "content": None}]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "user", "content": "x"}], "logit_bias": {"x": 1}}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "user", "content": "x"}], "stop": ["a", "b", "c", "d", "e"]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "user", "content": "x"}], "response_format": {}}),
    ("post", "/v1/completions", {"model": "0", "prompt": []}),
    ("post", "/v1/completions", {"model": "0", "prompt": ""}),
    ("post", "/v1/embeddings", {"model": "0", "input": [""]}),
    ("post", "/v1/audio/speech", {"model": "", "input": "hi"}),
    ("post", "/v1/audio/speech", {"model": "0", "input": " "}),
    ("post", "/v1/audio/transcriptions", {"audio_bytes": [1, 2]}),
    ("post", "/v1/audio/transcriptions", {"audio_bytes": [256], "model": "0"}),
    ("post", "/v1/entities", {"model": "0", "input": "x", "labels": [" "]}),
    ("post", "/v1/images/generations", {"model": "0", "prompt": "x", "size": "big"}),
    ("post", "/v1/images/generations", {"model": "0", "prompt": "x", "seed": -1}),
    ("post", "/v1/sessions/export", {"model": ""}),
    ("post", "/v1/memory/tier", {"model": "", "target_tier": "tier1_gpu_vram"}),
    ("post", "/v1/models", {"catalog": "a", "config": "b"}),
    ("post", "/v1/logs/level", {}),
    ("post", "/v1/advisor", {"needs": ["chat"], "vram_bytes": 0}),
    # bodies the schema takes: the server must take them too (an unknown model is a 404)
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "assistant", "tool_calls": TOOL_CALL}]}),
    ("post", "/v1/chat/completions", {"model": "0", "messages": [
        {"role": "assistant", "content": None}, {"role": "user", "content": [
            {"type": "text", "text": "x"}]}], "temperature": None, "stop": "x"}),
    ("post", "/v1/completions", {"model": "0", "prompt": ["x"], "logprobs": 5}),
    ("post", "/v1/embeddings", {"model": "0", "input": ["a", "b"], "encoding_format": None}),
    ("post", "/v1/audio/speech", {"model": "0", "input": "hi", "speed": None}),
    ("post", "/v1/entities", {"model": "0", "input": ["x"], "labels": "person"}),
    ("post", "/v1/memory/kv-park", {"max_bytes": 0}),
]
# Transcription's language (an ISO 639-1 code, a pattern in the document) and convert's
# document (exactly one of file and url, a oneOf): schema-valid ones reach the model (404).
AUDIO, DOC = {"model": "0", "audio_bytes": [1]}, {"model": "0"}
LANGUAGES = ["en", "EN", "en-US", "zh_Hant_TW", "english!", "e", "en-", " en", "en\n",
             "\u212ao"]          # the Kelvin sign lowercases to an ASCII "k"
DOCUMENTS = [{}, {"file": "aGVsbG8="}, {"url": "http://x/a.pdf"},
             {"file": "aGVsbG8=", "url": "http://x/a.pdf"}, {"url": ""},
             {"file": "aGVsbG8=", "url": ""}, {"file": None, "url": "http://x/a.pdf"},
             {"file": None, "url": None}]
EXAMPLES += [("post", "/v1/audio/transcriptions", {**AUDIO, "language": v}) for v in LANGUAGES]
EXAMPLES += [("post", "/v1/documents/convert", {**DOC, **d}) for d in DOCUMENTS]


def _schema(doc: dict, method: str, path: str) -> dict:
    return doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]


async def test_every_json_body_schema_is_the_one_its_model_emits():
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    seen = 0
    for route in app.router.routes:
        spec = endpoint_of(route.handler)
        if spec is None or spec.body is None:
            continue
        path = "/" + re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", route.path).lstrip("/")
        for method in route.methods - {"HEAD", "OPTIONS"}:
            assert _schema(doc, method.lower(), path) == body_schema(spec.body), path
            seen += 1
    assert seen >= 18


@pytest.mark.parametrize("method,path,body", EXAMPLES)
async def test_the_document_and_the_server_agree(method, path, body):
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    schema_ok = Draft202012Validator(_schema(doc, method, path)).is_valid(body)
    resp = await call(app, method, path, json=body)
    refused = resp.status == 400 and resp.json["error"]["type"] == "invalid_request_error"
    assert schema_ok != refused, (schema_ok, resp.status, resp.text)


def _form_schema(doc: dict, path: str) -> dict:
    return doc["paths"][path]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]


FORMS = [("/v1/audio/transcriptions", {"model": "0", "language": v}, ["file"])
         for v in LANGUAGES] + \
        [("/v1/documents/convert", {"model": "0", **{k: v for k, v in d.items() if k != "file"}},
          ["file"] if d.get("file") else []) for d in DOCUMENTS if None not in d.values()]


@pytest.mark.parametrize("path,fields,parts", FORMS)
async def test_the_form_schema_and_the_server_agree(path, fields, parts):
    """The multipart form of the same routes: its schema's verdict is the server's."""
    app = app_for()
    doc = (await call(app, "get", "/openapi.json")).json
    form = {**fields, **{name: "x" for name in parts}}      # a part is a string there
    schema_ok = Draft202012Validator(_form_schema(doc, path)).is_valid(form)
    files = {name: (f"{name}.bin", b"hello") for name in parts}
    files |= {name: (None, value) for name, value in fields.items()}    # multipart fields
    resp = await call(app, "post", path, files=files)
    refused = resp.status == 400 and resp.json["error"]["type"] == "invalid_request_error"
    assert schema_ok != refused, (schema_ok, resp.status, resp.text)
