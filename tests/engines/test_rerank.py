"""Rerank: rank pooling on a tiny generated reranker GGUF (plumbing only: its weights are
noise, so its scores are compared with llama.cpp's own rank pooling, never judged), a chat
model's yes/no judgement on qwen2.5-coder:0.5b, POST /v1/rerank through Sanic's ASGI client,
and Cohere's SDK against a real `hypnos serve`.
"""
import math
import os
import sys
import threading
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, ROOT
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.llama import judge
from hypnos.engines.llama.rerank import LlamaReranker, pack
from hypnos.engines.records import LoadSpec, RerankRequest
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from tiny_reranker import write_tiny_reranker  # noqa: E402
from harness import ServerProcess  # noqa: E402

Sanic.test_mode = True

QWEN = MODELS_DIR / "qwen2.5-coder-0.5b" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MINILM = MODELS_DIR / "minilm-l6-v2"
QUERY = "what is a panda"
DOCS = ["the giant panda is a bear of china", "paris is the capital of france",
        "pandas eat bamboo all day", "a machine uses power to apply forces", "ok"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A models folder: the tiny reranker, and hard links to qwen2.5-coder:0.5b and the
    MiniLM embedder (an embeddings model, which cannot rank)."""
    folder = tmp_path_factory.mktemp("rr")
    write_tiny_reranker(folder / "tiny-reranker.gguf")
    for src, name in ((QWEN, "qwen.gguf"), (MINILM / "model.int8.onnx", "minilm.onnx"),
                      (MINILM / "tokenizer.json", "minilm-tokenizer.json")):
        if not src.exists():
            pytest.fail(f"{src} is missing: ./run.sh test pulls the default lineup first")
        os.link(src, folder / name)
    return folder


@pytest.fixture(scope="module")
def tiny(models):
    return models / "tiny-reranker.gguf"


@pytest.fixture(scope="module")
def reranker(tiny):
    engine = LlamaReranker()
    engine.load(LoadSpec("tiny-rr", tiny, context_len=256, threads=2))
    yield engine
    engine.unload()


def reference_scores(path, query: str, docs: list[str]) -> list[float]:
    """llama.cpp's own rank pooling, one pair per context call, through llama-cpp-python's
    low-level API: [CLS] query [SEP] document [SEP], the layout the tiny GGUF's vocabulary
    asks for (add BOS and EOS, no separate SEP)."""
    from llama_cpp import llama_cpp as ll
    model = ll.llama_model_load_from_file(str(path).encode(), ll.llama_model_default_params())
    params = ll.llama_context_default_params()
    params.embeddings = True
    params.pooling_type = ll.LLAMA_POOLING_TYPE_RANK
    params.n_ctx = params.n_batch = params.n_ubatch = 256
    ctx = ll.llama_init_from_model(model, params)
    vocab = ll.llama_model_get_vocab(model)

    def tok(text: str) -> list[int]:
        buf = (ll.llama_token * 512)()
        n = ll.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, 512, False, False)
        return list(buf[:n])
    cls, sep = ll.llama_vocab_bos(vocab), ll.llama_vocab_sep(vocab)
    out = []
    try:
        for doc in docs:
            toks = [cls, *tok(query), sep, *tok(doc), sep]
            arr = (ll.llama_token * len(toks))(*toks)       # kept alive through the decode
            batch = ll.llama_batch_get_one(arr, len(toks))
            assert ll.llama_decode(ctx, batch) == 0
            out.append(float(ll.llama_get_embeddings_seq(ctx, 0)[0]))
            ll.llama_memory_clear(ll.llama_get_memory(ctx), True)
    finally:
        ll.llama_free(ctx)
        ll.llama_model_free(model)
    return out


def test_rank_pooling_matches_llama_cpp_on_the_tiny_reranker(tiny, reranker):
    """Plumbing only: the same numbers as llama.cpp's rank pooling run pair by pair. One
    pair per call agrees to float precision; pairs packed several to a batch move by a few
    thousandths (the tiny model's large random activations magnify the batched kernels'
    rounding), far less than the documents' scores differ by."""
    docs = DOCS * 3
    want = reference_scores(tiny, QUERY, docs)
    assert min(abs(a - b) for a in want[:5] for b in want[:5] if a != b) > 0.05
    alone = [reranker.rerank(RerankRequest(QUERY, [d]), threading.Event()).scores[0]
             for d in DOCS]
    assert all(math.isclose(g, w, rel_tol=1e-5, abs_tol=1e-5)
               for g, w in zip(alone, want[:5], strict=True))
    got = reranker.rerank(RerankRequest(QUERY, docs), threading.Event())
    assert len(got.scores) == len(docs)
    assert all(math.isclose(g, w, rel_tol=0.01) for g, w in zip(got.scores, want, strict=True))
    assert got.prompt_tokens > len(docs) * 10


def test_pack_keeps_order_and_bounds():
    assert pack([5, 5, 5], 10, 8) == [[0, 1], [2]]
    assert pack([1] * 5, 100, 2) == [[0, 1], [2, 3], [4]]
    assert pack([10, 1], 10, 8) == [[0], [1]]


def test_shared_prefix_and_yes_share():
    assert judge.shared_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert judge.shared_prefix([[1, 2, 3], [1, 2, 3]]) == 2       # each keeps one token
    assert judge.yes_share(0.0, 0.0) == 0.5
    assert math.isclose(judge.yes_share(2.0, 1.0), math.e / (math.e + 1))
    assert judge.yes_share(-800.0, 800.0) == 0.0 and judge.yes_share(800.0, -800.0) == 1.0


# ------------------------------------------------------------- HTTP (ASGI client)

CONFIG = """
models_dir = "{models}"
[[models]]
id = "tiny-rr"
modality = "rerank"
engine = "ggml_llama"
weights_path = "tiny-reranker.gguf"
context_len = 256
[[models]]
id = "qwen"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "qwen.gguf"
context_len = 2048
[[models]]
id = "minilm"
modality = "embeddings"
engine = "onnx_runtime"
weights_path = "minilm.onnx"
tokenizer_path = "minilm-tokenizer.json"
"""


@pytest.fixture(scope="module")
def app(models):
    cfg = parse_config(tomllib.loads(CONFIG.format(models=models)))
    cfg.limits.max_rerank_documents = 6
    return create_app(cfg, catalog=load_catalog(), stage=False)


async def post(app, body, path="/v1/rerank"):
    _req, resp = await app.asgi_client.post(path, json=body)
    return resp


def bad(resp, param):
    assert resp.status == 400, resp.text
    err = resp.json["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    return err["message"]


@pytest.mark.anyio
async def test_bad_input_is_a_400_naming_the_field(app):
    assert "'query'" in bad(await post(app, {"model": "tiny-rr", "documents": ["a"]}), "query")
    bad(await post(app, {"model": "tiny-rr", "query": "q", "documents": []}), "documents")
    bad(await post(app, {"model": "tiny-rr", "query": "q", "documents": [3]}), "documents")
    msg = bad(await post(app, {"model": "tiny-rr", "query": "q", "documents": ["a"] * 7}),
              "documents")
    assert "max_rerank_documents (6)" in msg
    for top_n in (0, -1):
        bad(await post(app, {"model": "tiny-rr", "query": "q", "documents": ["a", "b"],
                             "top_n": top_n}), "top_n")
    msg = bad(await post(app, {"model": "minilm", "query": "q", "documents": ["a"]}), "model")
    assert "qwen, tiny-rr" in msg
    resp = await post(app, {"model": "nope", "query": "q", "documents": ["a"]})
    assert resp.status == 404


@pytest.mark.anyio
async def test_tiny_reranker_over_http_permutes_with_its_documents(app, reranker):
    body = {"model": "tiny-rr", "query": QUERY, "documents": DOCS, "return_documents": True}
    resp = await post(app, body)
    assert resp.status == 200, resp.text
    out = resp.json
    assert out["object"] == "list" and out["model"] == "tiny-rr"
    assert out["usage"]["prompt_tokens"] == out["usage"]["total_tokens"] > 20
    assert out["hypnos_telemetry"]["inference_latency_ms"] > 0
    results = out["results"]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert sorted(r["index"] for r in results) == list(range(len(DOCS)))
    assert all(r["document"] == {"text": DOCS[r["index"]]} for r in results)
    direct = reranker.rerank(RerankRequest(QUERY, DOCS), threading.Event()).scores
    by_index = {r["index"]: r["relevance_score"] for r in results}
    assert all(math.isclose(by_index[i], direct[i], abs_tol=1e-4) for i in range(len(DOCS)))
    # Documents permuted: each keeps its score, the indices follow it.
    perm = [3, 0, 4, 2, 1]
    resp = await post(app, {"model": "tiny-rr", "query": QUERY, "top_n": 3,
                            "documents": [{"text": DOCS[p]} for p in perm]}, path="/rerank")
    assert resp.status == 200, resp.text
    moved = resp.json["results"]
    assert len(moved) == 3 and "document" not in moved[0]
    for r in moved:
        assert math.isclose(r["relevance_score"], by_index[perm[r["index"]]], abs_tol=1e-4)
    assert [perm[r["index"]] for r in moved] == [r["index"] for r in results[:3]]
    # top_n past the count means every document (llama-server's and Cohere's reading).
    resp = await post(app, {"model": "tiny-rr", "query": QUERY, "documents": DOCS[:2],
                            "top_n": 3})
    assert resp.status == 200 and len(resp.json["results"]) == 2
    # A pair past the context (256 tokens) names the document.
    long = " ".join(["a"] * 300)
    msg = bad(await post(app, {"model": "tiny-rr", "query": "q", "documents": ["b", long]}),
              "documents")
    assert "documents[1]" in msg


JUDGED = [
    # (query, documents, the relevant one): wide margins on qwen2.5-coder:0.5b.
    ("What is the capital of France?",
     ["Paris is the capital and largest city of France.",
      "Bananas are yellow fruit rich in potassium.",
      "The Python GIL prevents threads from running bytecode in parallel.",
      "Mount Everest is the highest mountain on Earth."], 0),
    ("Which fruit is yellow and has potassium?",
     ["Paris is the capital and largest city of France.",
      "Bananas are yellow fruit rich in potassium.",
      "The Python GIL prevents threads from running bytecode in parallel.",
      "Mount Everest is the highest mountain on Earth."], 1),
]


@pytest.mark.anyio
async def test_chat_model_judges_and_agrees_with_its_chat_logprobs(app):
    """The quality claim kept to what any machine agrees on: on two fixed sets with one
    plainly relevant document, qwen2.5-coder:0.5b ranks it first."""
    for query, docs, relevant in JUDGED:
        resp = await post(app, {"model": "qwen", "query": query, "documents": docs})
        assert resp.status == 200, resp.text
        results = resp.json["results"]
        assert results[0]["index"] == relevant, results
        assert all(0.0 < r["relevance_score"] < 1.0 for r in results)
    # One document's score = p(yes) / (p(yes) + p(no)) from the chat route's logprobs on the
    # same rendered prompt.
    query, docs, _ = JUDGED[0]
    resp = await post(app, {"model": "qwen", "query": query, "documents": docs[:1]})
    score = resp.json["results"][0]["relevance_score"]
    _req, chat = await app.asgi_client.post("/v1/chat/completions", json={
        "model": "qwen", "messages": judge.judge_messages(query, docs[0]), "max_tokens": 1,
        "logprobs": True, "top_logprobs": 20, "temperature": 0})
    assert chat.status == 200, chat.text
    top = {t["token"]: t["logprob"]
           for t in chat.json["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    p_yes, p_no = math.exp(top["yes"]), math.exp(top["no"])
    assert math.isclose(score, p_yes / (p_yes + p_no), abs_tol=0.02)


# ------------------------------------------------------- Cohere's SDK, real server

@pytest.fixture(scope="module")
def server(tmp_path_factory, models):
    tmp = tmp_path_factory.mktemp("rrsrv")
    path = tmp / "hypnos.toml"
    path.write_text(CONFIG.format(models=models))
    srv = ServerProcess(path, tmp / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


@pytest.mark.slow
def test_cohere_sdk_reranks_through_a_base_url(server):
    import cohere
    co = cohere.ClientV2(api_key="unused", base_url=server.base)
    resp = co.rerank(model="tiny-rr", query=QUERY, documents=DOCS, top_n=2)
    assert len(resp.results) == 2
    assert resp.results[0].relevance_score >= resp.results[1].relevance_score
    direct = server.post("/v1/rerank", {"model": "tiny-rr", "query": QUERY,
                                        "documents": DOCS}).json()["results"]
    assert [(r.index, round(r.relevance_score, 4)) for r in resp.results] == \
        [(r["index"], round(r["relevance_score"], 4)) for r in direct[:2]]


@pytest.mark.anyio
async def test_keys_guard_every_rerank_path(models):
    """/rerank and /v2/rerank sit outside /v1 and /api/: the keys apply there too."""
    cfg = parse_config(tomllib.loads(CONFIG.format(models=models) +
                                     '[server]\napi_keys = ["k1"]\n'))
    app = create_app(cfg, catalog=load_catalog(), stage=False)
    body = {"model": "tiny-rr", "query": "q", "documents": []}
    for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
        _req, resp = await app.asgi_client.post(path, json=body)
        assert resp.status == 401, (path, resp.text)
        _req, resp = await app.asgi_client.post(path, json=body,
                                                headers={"authorization": "Bearer k1"})
        bad(resp, "documents")


def test_a_rerank_leaves_the_chat_slots_warm():
    """The judging runs in a scratch context: the conversation in the model's only slot is
    still cached after a rerank (its next turn reuses the whole earlier prompt)."""
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import ChatRequest
    engine = LlamaChatEngine()
    engine.load(LoadSpec("qwen", QWEN, context_len=2048, slots=1, threads=2))
    try:
        turn = [{"role": "user", "content": "Name three rivers in Europe, one line each."}]
        first = engine.chat(ChatRequest(messages=turn, max_tokens=4, temperature=0), None,
                            threading.Event())
        before = engine.evaluated_positions
        ranked = engine.rerank(RerankRequest(JUDGED[0][0], JUDGED[0][1] * 3), threading.Event())
        assert len(ranked.scores) == 12
        assert engine.evaluated_positions == before          # the slot's context untouched
        again = engine.chat(ChatRequest(messages=turn, max_tokens=4, temperature=0), None,
                            threading.Event())
        assert again.cached_tokens >= first.prompt_tokens - 1
    finally:
        engine.unload()
