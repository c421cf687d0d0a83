"""bench/gpu_check.py's in-process checks: the app (Sanic's ASGI client, no port) on the
synthetic GGUFs: 0 plumbing on the CPU, 1 offload and /health, 2 memory truth against NVML,
3 tier moves against the pinned host-to-device bandwidth, 6 layer split and KV parking.

Each ``check_*`` takes the run's Ctx, blocks until done (it runs its own event loop) and
returns rows; Skip means it cannot run here. Bandwidth is measured in a child process
(``python gpu_checks_engine.py h2d BYTES``) so PyTorch's CUDA context never shows in this
process's NVML figure.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from gpu_check_core import Ctx, Row, Skip, judged

MIB, GIB = 2**20, 2**30
TOLERANCE = (0.05, 256 * MIB)
CONTEXT = 2048
_names = itertools.count()


# --------------------------------------------------------------------------- the app

def config_text(models: list[Path], vram: int | None = None, ram: int | None = None,
                slots: int = 1, ids: list[str] | None = None) -> str:
    """Models ``ids`` (default ``m0``, ``m1``..; ``slots`` slots of CONTEXT tokens each) from
    one folder; a simulated budget when ``vram`` (and ``ram``) is given."""
    ids = ids or [f"m{i}" for i in range(len(models))]
    folder = models[0].parent
    text = f'models_dir = "{folder}"\n'
    if vram is not None:
        text += f"[hardware.simulate]\nvram_bytes = {vram}\n"
        text += f"ram_bytes = {ram}\n" if ram is not None else ""
    for i, m in enumerate(models):
        if m.parent != folder:
            raise ValueError(f"{m} is not in {folder}")
        text += (f'[[models]]\nid = "{ids[i]}"\nmodality = "text_generation"\n'
                 f'engine = "ggml_llama"\nweights_path = "{m.name}"\nslots = {slots}\n'
                 f'context_len = {CONTEXT * slots}\nkeep_warm_in_ram = true\n')
    return text


def make_app(text: str):
    from sanic import Sanic

    from hypnos.service.app import create_app
    from hypnos.service.config.load import parse_config
    Sanic.test_mode = True
    return create_app(parse_config(tomllib.loads(text)), stage=False,
                      name=f"gpu-check-{next(_names)}")


def with_app(text: str, body):
    """Run ``await body(app)`` on a fresh app and shut its scheduler down; returns its value."""
    async def go():
        app = make_app(text)
        try:
            return await body(app)
        finally:
            await app.ctx.scheduler.shutdown()
    return asyncio.run(go())


# In-process calls come as a loopback caller: the browser layer refuses the test client's
# default ``mockserver`` host.
LOCAL = {"host": "127.0.0.1"}


async def move(app, model: str, tier: str) -> tuple[dict, float]:
    """POST /v1/memory/tier; the placement and the call's milliseconds."""
    t0 = time.perf_counter()
    _req, resp = await app.asgi_client.post("/v1/memory/tier", headers=LOCAL,
                                            json={"model": model, "target_tier": tier})
    if resp.status != 200:
        raise RuntimeError(f"move {model} to {tier}: {resp.status} {resp.text[:300]}")
    return resp.json["placement"], (time.perf_counter() - t0) * 1000


async def chat(app, model: str, messages: list[dict], tokens: int = 16) -> dict:
    _req, resp = await app.asgi_client.post("/v1/chat/completions", headers=LOCAL, json={
        "model": model, "messages": messages, "max_tokens": tokens, "temperature": 0})
    if resp.status != 200:
        raise RuntimeError(f"chat {model}: {resp.status} {resp.text[:300]}")
    return resp.json


def booked(placement: dict) -> int:
    return placement["vram_weight_bytes"] + placement["vram_kv_and_workspace_bytes"]


def within(measured: int, expected: int) -> bool:
    return abs(measured - expected) <= max(TOLERANCE[0] * expected, TOLERANCE[1])


def vram_pair() -> tuple[int, int | None]:
    """(the device's used VRAM, this process's share where NVML reports it) now."""
    from hypnos.service.scheduling.hardware import vram_used
    used = vram_used()
    if used is None:
        raise Skip("NVML reports no GPU")
    return used


def vram_growth(before: tuple[int, int | None], after: tuple[int, int | None]) -> tuple[int, str]:
    """The growth between two vram_pair samples, in one measure: this process's share when
    both samples have it (a process with no CUDA context yet is not listed), else the
    device's used memory."""
    if before[1] is not None and after[1] is not None:
        return after[1] - before[1], "process"
    return after[0] - before[0], "device"


def need_cuda(app) -> None:
    """Skip unless the host has an NVIDIA GPU and llama.cpp can offload to it (not with
    GPU_CHECK_PLUMBING=1, which lets a CPU host walk a check's code on a simulated budget)."""
    if os.environ.get("GPU_CHECK_PLUMBING") == "1":
        return
    hw, llama = app.ctx.scheduler.hardware, app.ctx.builds.get("ggml_llama")
    if hw.accelerator != "NvidiaCuda" or llama is None or not llama.accelerated:
        raise Skip(f"hardware {hw.accelerator}, llama.cpp build "
                   f"{llama.to_wire() if llama else 'missing'}")


def n_layers(model: Path) -> int:
    from hypnos.engines.gguf_meta import read_gguf_meta
    return read_gguf_meta(model).to_shape().num_layers


def tier1_booking(model: Path, slots: int = 1) -> tuple[int, int]:
    """(what the planner books in tier 1 for ``model`` whole, one layer's bytes), as
    config_text would configure it."""
    from hypnos.planner import place
    from hypnos.planner.types import PlacementRequest
    from hypnos.service.config.schema import ModelConfig
    from hypnos.service.scheduling.build import model_shape
    cfg = ModelConfig(id="m", modality="text_generation", engine="ggml_llama",
                      weights_path=str(model), context_len=CONTEXT * slots, slots=slots)
    shape = model_shape(cfg, {"weights_path": model})
    placed = place(PlacementRequest(shape, 1 << 50, slots=slots, context_len=CONTEXT * slots,
                                    discrete_gpu=True))
    return placed.booked_tier1_bytes, shape.layer_bytes


def one_model_budget(model: Path) -> int:
    """A simulated VRAM that holds one such model whole but not two."""
    from hypnos.planner.budgets import VRAM_RESERVE_BYTES
    booking, _layer = tier1_booking(model)
    return VRAM_RESERVE_BYTES + int(booking * 1.5)


# --------------------------------------------------------------------------- checks

def check_plumbing(ctx: Ctx) -> list[Row]:
    """0: the small model through llama.cpp directly and through the app on this host: the
    routes, a tier round trip and a chat answer (what the GPU checks rely on)."""
    import llama_cpp
    model = ctx.models[0]
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(str(model), n_ctx=256, n_gpu_layers=0, verbose=False)
    out = llm.create_completion("hello", max_tokens=8, temperature=0)
    n = out["usage"]["completion_tokens"]
    rows = [judged("0 llama.cpp loads the GGUF", f"{n} tokens in "
                   f"{time.perf_counter() - t0:.2f} s", "> 0 tokens", n > 0)]
    del llm

    async def body(app):
        _r, health = await app.asgi_client.get("/health", headers=LOCAL)
        got = [judged("0 /health", f"{health.status} backend {health.json.get('backend')}",
                      "200", health.status == 200)]
        for tier in ("tier2_pinned_ram", "tier3_nvme_ssd"):
            placement, ms = await move(app, "m0", tier)
            got.append(judged(f"0 move to {tier[:5]}", f"{placement['primary_tier']}, "
                              f"{ms:.0f} ms", tier, placement["primary_tier"] == tier))
        reply = await chat(app, "m0", [{"role": "user", "content": "hello"}], 8)
        tele = reply["hypnos_telemetry"]
        got.append(judged("0 chat after tier 3", f"{reply['usage']['completion_tokens']} "
                          f"tokens, from {tele['previous_tier']}", "tokens from tier3",
                          reply["usage"]["completion_tokens"] > 0
                          and tele["previous_tier"] == "tier3_nvme_ssd"))
        return got
    return rows + with_app(config_text([model]), body)


def check_offload(ctx: Ctx) -> list[Row]:
    """1: the build has CUDA and offloads; /health says cuda with an accelerator; every layer
    offloaded. (A CPU build with RPC also says llama_supports_gpu_offload() true: the RPC
    backend counts as a GPU there, so the libraries are checked too.)"""
    from llama_cpp import llama_cpp as ll

    from hypnos.engines import devices
    offload = bool(ll.llama_supports_gpu_offload())
    backend = devices.llama_backend()
    rows = [judged("1 llama_supports_gpu_offload()", str(offload), "True", offload),
            judged("1 libraries in llama_cpp/lib", backend, "cuda (libggml-cuda)",
                   backend == "cuda", package=str(devices.package_dir("llama_cpp")))]
    layers = n_layers(ctx.models[0])

    async def body(app):
        _r, health = await app.asgi_client.get("/health", headers=LOCAL)
        h = health.json
        got = [judged("1 /health backend, accelerator",
                      f"{h.get('backend')}, {h.get('accelerator')}", "cuda, True",
                      h.get("backend") == "cuda" and h.get("accelerator") is True)]
        try:
            need_cuda(app)
        except Skip as exc:               # check 1 fails where the others skip
            return got + [Row("1 layers offloaded (llama.cpp)", "not tried", f"{layers}",
                              "fail", str(exc))]
        await move(app, "m0", "tier1_gpu_vram")
        engine = app.ctx.scheduler.models["m0"].engine
        got.append(judged("1 layers offloaded (llama.cpp)", f"{engine.offloaded_layers}",
                          f">= {layers} (all)", engine.offloaded_layers >= layers))
        return got
    return rows + with_app(config_text([ctx.models[0]]), body)


def check_memory_truth(ctx: Ctx) -> list[Row]:
    """2: NVML's growth against the booking on each model; tier 2 frees it again."""
    rows = []
    for model in [ctx.models[0]] + ([ctx.large] if ctx.large else []):
        size = f"{model.stat().st_size / GIB:.1f} GiB"

        async def body(app, size=size):
            need_cuda(app)
            # One load and demotion first: the CUDA context then exists before the baseline
            # (it is not part of the booking, and NVML lists a process only once it has one).
            await move(app, "m0", "tier1_gpu_vram")
            await move(app, "m0", "tier2_pinned_ram")
            start = vram_pair()
            placement, ms = await move(app, "m0", "tier1_gpu_vram")
            (grown, measure), want = vram_growth(start, vram_pair()), booked(placement)
            got = [judged(f"2 VRAM = booked ({size})", f"{grown / MIB:.0f} MiB ({measure})",
                          f"{want / MIB:.0f} MiB +-5%/256M", within(grown, want),
                          nvml_bytes=grown, booked_bytes=want, load_ms=ms, measure=measure)]
            await move(app, "m0", "tier2_pinned_ram")
            left, measure = vram_growth(start, vram_pair())
            got.append(judged(f"2 tier 2 frees VRAM ({size})", f"{left / MIB:+.0f} MiB "
                              f"({measure})", "within 256 MiB of start",
                              abs(left) <= TOLERANCE[1]))
            return got
        rows += with_app(config_text([model]), body)
    return rows


def pinned_h2d(nbytes: int) -> dict:
    """Host-to-device copy of a pinned ``nbytes`` buffer, best of 3, in a child process:
    {"bytes_per_s", "library"}; raises Skip when neither PyTorch nor CuPy sees a GPU."""
    proc = subprocess.run([sys.executable, __file__, "h2d", str(nbytes)], capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise Skip(f"pinned H2D not measured: {last[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_tier_moves(ctx: Ctx) -> list[Row]:
    """3: 1->2->1 and 1->3->1; the promotion's GiB/s against the pinned H2D copy."""
    model = ctx.models[0]

    async def body(app):
        need_cuda(app)
        placement, _ms = await move(app, "m0", "tier1_gpu_vram")
        weights = placement["vram_weight_bytes"]
        times = {}
        for tier in ("tier2_pinned_ram", "tier3_nvme_ssd"):
            await move(app, "m0", tier)
            _p, ms = await move(app, "m0", "tier1_gpu_vram")
            times[tier] = ms
        return weights, times
    weights, times = with_app(config_text([model]), body)
    try:
        ref, why = pinned_h2d(weights), ""
    except Skip as exc:
        ref, why = {"bytes_per_s": float("nan")}, str(exc)
    ref_gibs = ref["bytes_per_s"] / GIB
    rows = []
    for tier, ms in times.items():
        gibs = weights / GIB / (ms / 1000)
        if tier == "tier2_pinned_ram":
            row = judged("3 promotion 2->1 vs pinned H2D", f"{gibs:.1f} GiB/s ({ms:.0f} ms)",
                         f">= 50% of {ref_gibs:.1f} GiB/s", gibs >= 0.5 * ref_gibs,
                         reference=ref, ms=ms)
            if why:
                row.verdict, row.reason = "skip", why
            rows.append(row)
        else:
            rows.append(judged("3 promotion 3->1 (reported)", f"{gibs:.1f} GiB/s ({ms:.0f} ms)",
                               f"(H2D {ref_gibs:.1f} GiB/s)", True, ms=ms))
    return rows


def check_split_and_parking(ctx: Ctx) -> list[Row]:
    """6: a tier-1 budget for about half the layers splits them as the planner says; a
    conversation parked across a GPU swap to another model is restored."""
    from hypnos.planner.budgets import VRAM_RESERVE_BYTES
    model = ctx.models[0]
    layers = n_layers(model)
    booking, layer = tier1_booking(model)
    budget = VRAM_RESERVE_BYTES + booking - (layers // 2) * layer    # about half the layers

    async def split(app):
        need_cuda(app)
        placement, _ms = await move(app, "m0", "tier1_gpu_vram")
        engine = app.ctx.scheduler.models["m0"].engine
        planned = placement["gpu_layers"]
        return [judged("6 half budget splits layers", f"{planned}/{layers} on the GPU",
                       f"0 < layers < {layers}", 0 < planned < layers),
                judged("6 llama.cpp reports the split", f"{engine.offloaded_layers} offloaded",
                       f"{planned} (planner)", engine.offloaded_layers == planned)]
    rows = with_app(config_text([model], vram=budget), split)
    if len(ctx.models) < 2:
        return rows + [Row("6 KV parking", "-", "-", "skip", "needs two models")]
    one = one_model_budget(model)

    async def parking(app):
        need_cuda(app)
        conv = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]
        first = await chat(app, "m0", conv)
        await chat(app, "m1", [{"role": "user", "content": "hello"}])
        conv += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "And then?"}]
        second = await chat(app, "m0", conv)
        tele = second["hypnos_telemetry"]
        restored = tele.get("tier_switch_phases", {}).get("kv_restored_tokens", 0)
        prior = first["usage"]["prompt_tokens"]
        return [judged("6 KV parked across a GPU swap", f"{restored} tokens restored, from "
                       f"{tele['previous_tier']}", f">= {prior} (turn 1's prompt)",
                       restored >= prior and tele["previous_tier"] != "tier1_gpu_vram",
                       telemetry=tele)]
    return rows + with_app(config_text(ctx.models[:2], vram=one), parking)


def _h2d_main(nbytes: int) -> None:
    """The child of ``pinned_h2d``: prints one JSON line."""
    def timed(copy, sync) -> float:
        copy()
        sync()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            copy()
            sync()
            best = min(best, time.perf_counter() - t0)
        return best
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("torch sees no CUDA device")
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        secs = timed(lambda: dst.copy_(src, non_blocking=True), torch.cuda.synchronize)
        lib = f"torch {torch.__version__}"
    except ImportError:
        import cupy
        import numpy as np
        mem = cupy.cuda.alloc_pinned_memory(nbytes)
        host = np.frombuffer(mem, dtype=np.uint8, count=nbytes)
        dev = cupy.empty(nbytes, dtype=cupy.uint8)
        secs = timed(lambda: dev.set(host), cupy.cuda.Device().synchronize)
        lib = f"cupy {cupy.__version__}"
    print(json.dumps({"bytes_per_s": nbytes / secs, "library": lib, "bytes": nbytes}))


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "h2d":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    _h2d_main(int(sys.argv[2]))
