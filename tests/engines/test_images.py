"""POST /v1/images/generations and /v1/images/edits: request validation, clamping, the
model's [models.image] defaults, model-file validation, the 503 naming the pip extra when
stable-diffusion.cpp is not installed, and the official `openai` client reaching the route.

No image model can be had here: no diffusion weights are on the package index and none can
be built, and the library (the ``images`` extra, a 12-minute compile) is not in the default
extras. So the generation path (pixels, per-image seeds), the library's refusal of a GGUF
without a diffusion model and its crash on a bad file (isolated in `sd_worker`) are not
exercised. Each test asserts one outcome whatever is installed: the ones that reach the load
hide the library (``no_library``), so they check the 503 on every machine."""
import io
import os
import sys
import threading

import openai
import pytest
from sanic import Sanic

from conftest import ROOT, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.engines.errors import EngineError
from hypnos.engines.records import LoadSpec
from hypnos.engines.sd_diffusion import DiffusionGenerator, check_model_file
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config
from hypnos.service.config.schema import ImageConfig
from hypnos.service.errors import InvalidRequest
from hypnos.service.routes.images import clamp_side, parse_image_request, parse_size

Sanic.test_mode = True
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
FLUX_TENSOR = "model.diffusion_model.double_blocks.0.img_attn.qkv.weight"


def write_gguf(path, tensor="just.a.tensor"):
    """A valid GGUF holding one tiny tensor and no diffusion model."""
    import gguf
    import numpy as np
    writer = gguf.GGUFWriter(str(path), "not-a-diffusion-model")
    writer.add_tensor(tensor, np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


CONFIG = """
models_dir = "{root}"
[limits]
max_images_per_request = 3
max_image_bytes = 1000
[[models]]
id = "sd"
modality = "image_generation"
engine = "ggml_diffusion"
weights_path = "sd/model.gguf"
[[models]]
id = "crashy"
modality = "image_generation"
engine = "ggml_diffusion"
weights_path = "sd/flux-block.gguf"
[[models]]
id = "notes"
modality = "image_generation"
engine = "ggml_diffusion"
weights_path = "sd/notes.txt"
[[models]]
id = "editor"
modality = "image_generation"
engine = "ggml_diffusion"
weights_path = "sd/model.gguf"
[models.image]
steps = 4
cfg_scale = 1.0
edit = true
[[models]]
id = "docs"
modality = "document_conversion"
engine = "docling"
"""


@pytest.fixture(scope="module")
def models_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    (root / "sd").mkdir()
    write_gguf(root / "sd" / "model.gguf")
    # One FLUX-named tensor: stable-diffusion.cpp takes it for a FLUX model and crashes.
    write_gguf(root / "sd" / "flux-block.gguf", FLUX_TENSOR)
    (root / "sd" / "notes.txt").write_text("these are notes, not weights\n" * 10)
    return root


@pytest.fixture
def no_library(monkeypatch):
    """stable-diffusion.cpp uninstalled for this test, whatever this machine has: a ``None``
    in sys.modules is what Python's import system reports as no such module (the engine
    checks with ``importlib.util.find_spec`` in this process, before it starts a worker)."""
    monkeypatch.setitem(sys.modules, "stable_diffusion_cpp", None)


@pytest.fixture
def app(models_root):
    import tomllib
    cfg = parse_config(tomllib.loads(CONFIG.format(root=models_root)))
    return create_app(cfg, catalog=load_catalog(), stage=False)


async def post(app, path, **kw):
    _req, resp = await app.asgi_client.post(path, **kw)
    return resp


def assert_error(resp, status, type_, param=None, fragment=""):
    assert resp.status == status, resp.text
    err = resp.json["error"]
    assert err["type"] == type_, err
    if param is not None:
        assert err["param"] == param, err
    assert fragment in err["message"], err
    return err


# ------------------------------------------------------------------ pure parsing

@pytest.mark.parametrize("size,expected", [
    ("1000x700", (992, 688)), ("1024x1024", (1024, 1024)), ("64x64", (256, 256)),
    ("5000x300", (2048, 288)), ("2047X257", (2032, 256)), (None, (1024, 1024)),
    ("auto", (1024, 1024)),
])
def test_sizes_are_clamped_and_rounded_down_to_16(size, expected):
    assert parse_size(size) == expected
    assert all(clamp_side(s) == s for s in expected)


def test_steps_clamped_defaults_from_models_image_and_seed():
    image = ImageConfig(steps=6, cfg_scale=1.5)
    req = parse_image_request({"prompt": "x"}, image, 4)
    assert (req.steps, req.cfg_scale, req.n, req.width) == (6, 1.5, 1, 1024)
    assert 0 <= req.seed < 2**31
    req = parse_image_request({"prompt": "x", "steps": 500, "seed": 7, "cfg_scale": 3,
                               "negative_prompt": "blur", "n": 4}, image, 4)
    assert (req.steps, req.seed, req.cfg_scale, req.negative_prompt, req.n) == \
        (100, 7, 3.0, "blur", 4)
    assert parse_image_request({"prompt": "x", "steps": 0}, image, 4).steps == 1
    # Multipart fields arrive as text.
    req = parse_image_request({"prompt": "x", "steps": "8", "n": "2", "seed": "11"}, image, 4)
    assert (req.steps, req.n, req.seed) == (8, 2, 11)
    with pytest.raises(InvalidRequest):
        parse_image_request({"prompt": "x", "n": 5}, image, 4)


def test_model_file_validation():
    assert check_model_file(require_smollm2()) == "gguf"
    with pytest.raises(EngineError, match="missing"):
        check_model_file(ROOT / "nowhere.gguf")
    with pytest.raises(EngineError, match="not a GGUF, safetensors or checkpoint"):
        check_model_file(ROOT / "pyproject.toml")


def test_safetensors_header_is_recognised(tmp_path):
    import json
    import struct
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "vae.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 4)
    assert check_model_file(path) == "safetensors"


# ------------------------------------------------------------------ the routes

BAD_GENERATIONS = [
    ({"prompt": "x"}, "model"),
    ({"model": "sd"}, "prompt"),
    ({"model": "sd", "prompt": 5}, "prompt"),
    ({"model": "sd", "prompt": "x", "n": 4}, "n"),
    ({"model": "sd", "prompt": "x", "n": 0}, "n"),
    ({"model": "sd", "prompt": "x", "n": "two"}, "n"),
    ({"model": "sd", "prompt": "x", "size": "big"}, "size"),
    ({"model": "sd", "prompt": "x", "steps": 2.5}, "steps"),
    ({"model": "sd", "prompt": "x", "seed": -1}, "seed"),
    ({"model": "sd", "prompt": "x", "cfg_scale": "strong"}, "cfg_scale"),
    ({"model": "sd", "prompt": "x", "response_format": "png"}, "response_format"),
    ({"model": "docs", "prompt": "x"}, "model"),
]


@pytest.mark.anyio
@pytest.mark.parametrize("body,param", BAD_GENERATIONS)
async def test_bad_generation_requests_are_400(app, body, param):
    resp = await post(app, "/v1/images/generations", json=body)
    assert_error(resp, 400, "invalid_request_error", param)


@pytest.mark.anyio
async def test_unknown_model_is_404(app):
    resp = await post(app, "/v1/images/generations", json={"model": "nope", "prompt": "x"})
    assert_error(resp, 404, "model_not_found")


@pytest.mark.anyio
async def test_a_file_that_is_not_a_model_is_refused_before_the_library(app):
    resp = await post(app, "/v1/images/generations", json={"model": "notes", "prompt": "x"})
    assert_error(resp, 500, "server_error", fragment="notes.txt is not a GGUF")


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["sd", "crashy"])
async def test_without_the_library_a_model_file_is_503_naming_the_extra(app, no_library,
                                                                           model):
    """The files are GGUFs, so the load gets past the file check and finds no library: the
    model is not available and the message names the pip extra. (With the library,
    stable-diffusion.cpp would refuse "sd" and crash on "crashy"; not exercised here.)"""
    resp = await post(app, "/v1/images/generations", json={"model": model, "prompt": "x"})
    assert_error(resp, 503, "model_not_available", fragment="pip install 'hypnos[images]'")
    assert (await app.asgi_client.get("/health"))[1].status == 200


@pytest.mark.anyio
async def test_edit_validation(app):
    files = [("image", ("a.png", PNG))]
    resp = await post(app, "/v1/images/edits", data={"model": "sd", "prompt": "x"},
                      files=files)
    assert_error(resp, 400, "invalid_request_error", "model", "does not edit")
    resp = await post(app, "/v1/images/edits",
                      data={"model": "editor", "prompt": "x", "mask": "m"}, files=files)
    assert_error(resp, 400, "invalid_request_error", "mask")
    resp = await post(app, "/v1/images/edits", data={"model": "editor", "prompt": "x"},
                      files=files + [("mask", ("m.png", PNG))])
    assert_error(resp, 400, "invalid_request_error", "mask")
    resp = await post(app, "/v1/images/edits", data={"model": "editor", "prompt": "x"},
                      files=[("notes", ("n.txt", b"no image here"))])
    assert_error(resp, 400, "invalid_request_error", "image", "no 'image' part")
    resp = await post(app, "/v1/images/edits", data={"model": "editor", "prompt": "x"},
                      files=[("image", ("a.txt", b"plain text, no image"))])
    assert_error(resp, 400, "invalid_request_error", "image", "not PNG, JPEG or WebP")
    resp = await post(app, "/v1/images/edits", data={"model": "editor", "prompt": "x"},
                      files=[("image[]", ("big.png", PNG + b"\x00" * 2000))])
    assert_error(resp, 400, "invalid_request_error", "image", "max_image_bytes")
    resp = await post(app, "/v1/images/edits", data={"model": "editor", "prompt": "x",
                                                      "n": "9"}, files=files)
    assert_error(resp, 400, "invalid_request_error", "n")
    resp = await post(app, "/v1/images/edits", json={"model": "editor", "prompt": "x"})
    assert_error(resp, 400, "invalid_request_error", fragment="multipart/form-data")


@pytest.mark.anyio
async def test_a_valid_edit_reaches_the_engine(app, no_library):
    """Past validation the lease loads the model, and the load (not the route) answers: the
    library is missing. What an edit makes needs real weights, which cannot be had here."""
    files = [("image", ("a.png", PNG)), ("image[]", ("b.png", PNG))]
    resp = await post(app, "/v1/images/edits", data={"model": "editor", "prompt": "x"},
                      files=files)
    assert_error(resp, 503, "model_not_available",
                 fragment="engine ggml_diffusion needs its library: pip install 'hypnos[images]'")


def test_engine_load_refuses_a_text_file(models_root):
    with pytest.raises(EngineError, match="not a GGUF"):
        DiffusionGenerator().load(LoadSpec(model_id="x",
                                           weights_path=models_root / "sd" / "notes.txt"))
    with pytest.raises(EngineError, match="text encoder file is missing"):
        DiffusionGenerator().load(LoadSpec(
            model_id="x", weights_path=models_root / "sd" / "model.gguf",
            files={"text_encoder_path": models_root / "sd" / "none.gguf"}))


def test_a_load_without_the_library_leaves_the_engine_unloaded(models_root, no_library):
    """The load says which extra is missing, starts no worker, and the engine stays
    unloaded. (A library crash on this file, an EngineError naming the signal, needs the
    images extra: not exercised here.)"""
    from hypnos.engines.errors import EngineUnavailable
    from hypnos.engines.records import ImageRequest
    engine = DiffusionGenerator()
    with pytest.raises(EngineUnavailable, match=r"hypnos\[images\]"):
        engine.load(LoadSpec(model_id="x", threads=1,
                             weights_path=models_root / "sd" / "flux-block.gguf"))
    req = ImageRequest(prompt="x", width=256, height=256, steps=1, cfg_scale=1.0, seed=1)
    with pytest.raises(EngineError, match="not loaded"):
        engine.generate(req, threading.Event())


# ------------------------------------------------------------------ the official client

sys.path.insert(0, str(ROOT / "bench"))


@pytest.fixture(scope="module")
def server(models_root, tmp_path_factory):
    from harness import ServerProcess
    tmp = tmp_path_factory.mktemp("srv")
    path = tmp / "hypnos.toml"
    path.write_text(CONFIG.format(root=models_root))
    # HYPNOS_MODELS_DIR would override the config's models_dir (the test's own folder).
    saved = os.environ.pop("HYPNOS_MODELS_DIR", None)
    try:
        srv = ServerProcess(path, tmp / "server.log", ready_timeout=120)
    finally:
        if saved is not None:
            os.environ["HYPNOS_MODELS_DIR"] = saved
    yield srv
    srv.stop()


@pytest.mark.slow
def test_openai_client_images_generate_reaches_the_route(server):
    client = openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        client.images.generate(model="sd", prompt="a lighthouse", n=4)
    assert "max_images_per_request (3)" in exc.value.message
    with pytest.raises(openai.BadRequestError) as exc:
        client.images.generate(model="sd", prompt="a lighthouse", size="huge")
    assert exc.value.body["param"] == "size"
    # A valid request reaches the load: "notes" is refused by the file check, before the
    # library, so the answer is the same whether or not the server has it.
    with pytest.raises(openai.InternalServerError) as exc:
        client.images.generate(model="notes", prompt="a lighthouse", size="1024x1024",
                               response_format="b64_json")
    assert "notes.txt is not a GGUF" in exc.value.message
    with pytest.raises(openai.BadRequestError) as exc:
        client.images.edit(model="sd", prompt="a scarf", image=("a.png", io.BytesIO(PNG)))
    assert "does not edit" in exc.value.message
