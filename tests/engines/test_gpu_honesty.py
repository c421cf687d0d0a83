"""Issue 17, honest figures: a GPU that NVML reports is not a GPU the engines can use.

The hardware (and, where it must not depend on this machine, the engine-build probe) is
injected; the engines are the real ones on the real models of the default lineup. These hold
on any machine: with the injected CPU build the model books no VRAM whatever the host has.
"""
import logging
import tomllib

import pytest
from sanic import Sanic

from conftest import lineup_config, model_block, require_smollm2
from hypnos.engines import devices
from hypnos.engines.llama import log as ggml_log
from hypnos.engines.devices import EngineBuild
from hypnos.planner.types import GIB, Accelerator, Hardware, Topology
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = [pytest.mark.anyio, pytest.mark.real]

# What NVML says on an H200 host; not simulated: the budgets are this "real" GPU's.
H200 = Hardware(Accelerator.NVIDIA, Topology.DISCRETE, 141 * GIB, 64 * GIB, "NVIDIA H200")
CPU_LLAMA = EngineBuild("llama-cpp-python", True, "cpu", False,
                        "cpu build, llama_supports_gpu_offload() is False",
                        devices.REINSTALL)
GPU_ONNX = EngineBuild("onnxruntime", True, "cuda", True,
                       "CUDAExecutionProvider compiled in (each session reports its own)")


def _app(*blocks, builds):
    cfg = parse_config(tomllib.loads(lineup_config(*blocks)))
    return create_app(cfg, hardware=H200, builds=builds, stage=False)


async def _status(app, model_id):
    _req, resp = await app.asgi_client.get("/v1/memory/status")
    assert resp.status == 200, resp.text
    body = resp.json
    return body, next(m for m in body["models"] if m["id"] == model_id)


async def test_a_cpu_build_on_an_nvml_gpu_books_no_vram_and_says_so(caplog):
    require_smollm2()
    with caplog.at_level(logging.WARNING, logger="hypnos.accel"):
        app = _app(model_block("smol", "text_generation", context_len=2048),
                   builds={"ggml_llama": CPU_LLAMA})
    warnings = [r.getMessage() for r in caplog.records if r.name == "hypnos.accel"]
    assert len(warnings) == 1                       # one start-up warning, naming the fix
    assert "NVIDIA H200" in warnings[0] and "llama-cpp-python" in warnings[0]
    assert "HYPNOS_GPU=cuda ./run.sh" in warnings[0] and "book no VRAM" in warnings[0]

    _req, resp = await app.asgi_client.get("/health")
    assert (resp.json["backend"], resp.json["accelerator"]) == ("cpu", False)
    assert resp.json["engines"]["ggml_llama"]["fix"] == devices.REINSTALL
    _req, resp = await app.asgi_client.get("/v1/models")
    assert (resp.json["backend"], resp.json["accelerator"]) == ("cpu", False)
    planned = resp.json["data"][0]["placement"]
    assert planned["device"] == "cpu" and planned["gpu_layers"] == 0

    _req, resp = await app.asgi_client.post("/v1/memory/tier", json={
        "model": "smol", "target_tier": "tier1_gpu_vram"})       # the real engine loads
    assert resp.status == 200, resp.text
    body, smol = await _status(app, "smol")
    assert smol["current_tier"] == "tier1_gpu_vram"          # loaded and ready ...
    p = smol["placement"]
    assert (p["vram_weight_bytes"], p["vram_kv_and_workspace_bytes"], p["gpu_layers"]) == \
        (0, 0, 0)                                            # ... with no VRAM booked
    assert p["pinned_ram_layers"] == 30 and p["pinned_ram_bytes"] > 98_000_000
    assert body["tier1_vram_used_bytes"] == 0
    assert smol["device"] == "cpu" and p["device"] == "cpu"
    # The real engine's own report: llama.cpp put no layer on a GPU (asked for none).
    assert smol["offloaded_layers"] == 0
    await app.ctx.scheduler.shutdown()


async def test_an_onnx_session_that_got_the_cpu_is_rebooked_in_host_memory():
    # The build probe says onnxruntime has CUDA compiled in (as onnxruntime-gpu would); the
    # real session reports the provider it got. Whatever it got, VRAM is booked iff CUDA.
    app = _app(model_block("minilm", "embeddings"), builds={"onnx_runtime": GPU_ONNX})
    assert app.ctx.gpu_warning is None
    planned = (await _status(app, "minilm"))[1]["placement"]
    assert planned["device"] == "cuda"                     # the plan, before any session
    _req, resp = await app.asgi_client.post("/v1/embeddings",
                                            json={"model": "minilm", "input": "hello"})
    assert resp.status == 200, resp.text
    engine = app.ctx.scheduler.models["minilm"].engine
    on_cuda = engine.provider == "CUDAExecutionProvider"
    body, m = await _status(app, "minilm")
    assert m["device"] == ("cuda" if on_cuda else "cpu") == m["placement"]["device"]
    assert (body["tier1_vram_used_bytes"] > 0) is on_cuda
    assert (m["placement"]["pinned_ram_bytes"] > 0) is not on_cuda
    await app.ctx.scheduler.shutdown()


def test_the_real_llama_probe_is_what_the_library_says():
    from llama_cpp import llama_cpp as ll
    build = devices.llama_build(True)
    assert build.backend in ("cuda", "metal", "cpu")
    # A CPU build (with RPC, llama_supports_gpu_offload() is True) never claims the GPU.
    expected = bool(ll.llama_supports_gpu_offload()) and build.backend != "cpu"
    assert build.installed and build.accelerated is expected
    assert devices.llama_build(False).accelerated is False    # no GPU: nothing imported


def test_offloaded_layers_are_read_from_llama_cpp_log():
    lines = ["load_tensors: offloading output layer to GPU",
             "load_tensors: offloading 29 repeating layers to GPU",
             "load_tensors: offloaded 30/31 layers to GPU",
             "load_tensors:        CUDA0 model buffer size =    80.00 MiB"]
    assert ggml_log.offloaded_layers(lines) == 30
    assert ggml_log.offloaded_layers(["load_tensors: CPU_Mapped model buffer size = 98 MiB"]) \
        == 0
