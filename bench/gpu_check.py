"""The device check (issue 17): on an NVIDIA machine, SmolLM2 served with every layer on the
GPU, and what NVML and llama.cpp say against what Hypnos booked. Prints one table; exits 1
when a check fails (2 when the machine or the build cannot run it at all).

    python bench/gpu_check.py [--model models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf]

Checks, in one process, through the server's own routes (Sanic's ASGI client):
  1. VRAM: NVML shows this process's VRAM (else the device's) grow by the booked bytes when
     the model is moved to tier 1, within 5 % or 256 MiB; llama.cpp offloaded every layer.
  2. Tier moves: to tier 2 and to tier 3 free that VRAM (back within 256 MiB of the start), a
     move back restores it; the promotion time per GiB from tier 2 and from tier 3.
  3. Decode tokens/s on the GPU against the same model on the CPU (gpu_layers 0), same run,
     same prompt, greedy: the GPU must be faster.
  4. A simulated 250 MiB tier-1 budget (``[hardware.simulate]``): the planner splits the
     layers, and the layers llama.cpp reports offloaded are the planner's gpu_layers.

Needs a CUDA build of llama-cpp-python (``HYPNOS_GPU=cuda ./run.sh``; on a host without
network, build the wheel from the sdist with the system nvcc: ``CMAKE_ARGS="-DGGML_CUDA=on
-DCMAKE_CUDA_ARCHITECTURES=90" CMAKE_BUILD_PARALLEL_LEVEL=16 pip wheel --no-deps
--no-build-isolation --no-cache-dir <llama-cpp-python sdist or source dir>``). Not run on a
GPU yet: the machine that wrote it has none.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB, GIB = 2**20, 2**30
TOLERANCE = (0.05, 256 * MIB)
SIM_BUDGET = 250 * MIB
PROMPT = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]


class Table:
    def __init__(self):
        self.rows: list[tuple[str, str, str, bool]] = []

    def add(self, check: str, measured: str, expected: str, ok: bool) -> bool:
        self.rows.append((check, measured, expected, ok))
        return ok

    def print(self) -> None:
        print(f"{'check':<34}{'measured':<34}{'expected':<34}verdict")
        for check, measured, expected, ok in self.rows:
            print(f"{check:<34}{measured:<34}{expected:<34}{'pass' if ok else 'FAIL'}")

    @property
    def failed(self) -> bool:
        return not all(ok for *_, ok in self.rows)


def config_text(model: Path, simulate_vram: int | None = None) -> str:
    sim = (f"[hardware.simulate]\nvram_bytes = {simulate_vram}\n") if simulate_vram else ""
    return (f'models_dir = "{model.parent.parent}"\n{sim}'
            f'[[models]]\nid = "smol"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
            f'weights_path = "{model.parent.name}/{model.name}"\nslots = 1\ncontext_len = 2048\n'
            f'keep_warm_in_ram = true\n')


def make_app(text: str, name: str):
    from sanic import Sanic
    from hypnos.service.app import create_app
    from hypnos.service.config.load import parse_config
    Sanic.test_mode = True
    return create_app(parse_config(tomllib.loads(text)), stage=False, name=name)


def vram_now() -> int:
    """This process's VRAM where NVML reports it, else the device's used memory."""
    from hypnos.service.scheduling.hardware import vram_used
    used = vram_used()
    if used is None:
        raise SystemExit("NVML reports no GPU")
    return used[1] if used[1] is not None else used[0]


async def move(app, tier: str) -> tuple[dict, float]:
    t0 = time.perf_counter()
    _req, resp = await app.asgi_client.post("/v1/memory/tier",
                                            json={"model": "smol", "target_tier": tier})
    if resp.status != 200:
        raise SystemExit(f"move to {tier}: {resp.status} {resp.text}")
    return resp.json["placement"], (time.perf_counter() - t0) * 1000


def within(measured: int, booked: int) -> bool:
    return abs(measured - booked) <= max(TOLERANCE[0] * booked, TOLERANCE[1])


async def check_vram_and_moves(app, table: Table, n_layers: int) -> int:
    start = vram_now()
    placement, _ms = await move(app, "tier1_gpu_vram")
    booked = placement["vram_weight_bytes"] + placement["vram_kv_and_workspace_bytes"]
    grown = vram_now() - start
    table.add("1 VRAM growth = booked", f"{grown / MIB:.1f} MiB", f"{booked / MIB:.1f} MiB "
              "(5 % or 256 MiB)", within(grown, booked))
    engine = app.ctx.scheduler.models["smol"].engine
    table.add("1 layers offloaded (llama.cpp)", str(engine.offloaded_layers),
              f">= {n_layers} (all)", engine.offloaded_layers >= n_layers)
    for tier in ("tier2_pinned_ram", "tier3_nvme_ssd"):
        await move(app, "tier1_gpu_vram")
        await move(app, tier)
        left = vram_now() - start
        table.add(f"2 move to {tier[:5]} frees VRAM", f"{left / MIB:+.1f} MiB vs start",
                  "within 256 MiB of start", abs(left) <= TOLERANCE[1])
        _p, ms = await move(app, "tier1_gpu_vram")
        back = vram_now() - start
        table.add(f"2 back from {tier[:5]} restores", f"{back / MIB:.1f} MiB, {ms:.0f} ms",
                  f"{booked / MIB:.1f} MiB", within(back, booked))
        table.add(f"2 promotion from {tier[:5]} per GiB", f"{ms / (booked / GIB):.0f} ms/GiB",
                  "(reported)", True)
    return booked


def decode_tps(engine) -> float:
    from hypnos.engines.records import ChatRequest
    result = engine.chat(ChatRequest(messages=PROMPT, max_tokens=128, temperature=0.0), None,
                         threading.Event())
    return result.timings.decode_tokens_per_s


def check_speed(app, model: Path, table: Table) -> None:
    from hypnos.engines.records import LoadSpec
    from hypnos.engines.llama.engine import LlamaChatEngine
    gpu = decode_tps(app.ctx.scheduler.models["smol"].engine)
    cpu_engine = LlamaChatEngine()
    cpu_engine.load(LoadSpec("smol-cpu", model, context_len=2048, slots=1, gpu_layers=0))
    try:
        cpu = decode_tps(cpu_engine)
        device = cpu_engine.device
    finally:
        cpu_engine.unload()
    table.add("3 decode tokens/s GPU vs CPU", f"{gpu:.0f} vs {cpu:.0f} ({device})",
              "GPU faster", gpu > cpu)


async def check_split(model: Path, table: Table, n_layers: int) -> None:
    from hypnos.planner.budgets import VRAM_RESERVE_BYTES
    app = make_app(config_text(model, SIM_BUDGET + VRAM_RESERVE_BYTES), "gpu-check-split")
    try:
        placement, _ms = await move(app, "tier1_gpu_vram")
        engine = app.ctx.scheduler.models["smol"].engine
        planned = placement["gpu_layers"]
        table.add("4 250 MiB budget splits layers", f"{planned}/{n_layers} on the GPU",
                  f"0 < layers < {n_layers}", 0 < planned < n_layers)
        table.add("4 llama.cpp reports the split", f"{engine.offloaded_layers} offloaded",
                  f"{planned} (planner)", engine.offloaded_layers == planned)
    finally:
        await app.ctx.scheduler.shutdown()


async def run(model: Path) -> Table:
    from hypnos.engines.gguf_meta import read_gguf_meta
    table = Table()
    app = make_app(config_text(model), "gpu-check")
    hw, builds = app.ctx.scheduler.hardware, app.ctx.builds
    llama = builds.get("ggml_llama")
    if hw.accelerator != "NvidiaCuda" or llama is None or not llama.accelerated:
        print(f"cannot run: hardware {hw.accelerator}, llama.cpp build "
              f"{llama.to_wire() if llama else 'missing'}", file=sys.stderr)
        raise SystemExit(2)
    n_layers = read_gguf_meta(model).to_shape().num_layers
    try:
        await check_vram_and_moves(app, table, n_layers)
        await asyncio.to_thread(check_speed, app, model, table)
    finally:
        await app.ctx.scheduler.shutdown()
    await check_split(model, table, n_layers)
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path,
                    default=ROOT / "models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    table = asyncio.run(run(args.model.resolve()))
    table.print()
    return 1 if table.failed else 0


if __name__ == "__main__":
    sys.exit(main())
