"""bench/gpu_check.py's checks against llama.cpp's own server, both as real processes on the
GPU: 4 decode tokens/s (GPU against CPU in-process; Hypnos against ``llama-server``, single
stream and 4 concurrent), 5 the swap workload of bench/swap_workload.py against
``llama-server --models-max 1``; and 7, what this machine cannot check.

Each ``check_*`` takes the run's Ctx, blocks, and returns rows; the servers it starts are
stopped before it returns, whatever happened.
"""
from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from gpu_check_core import Ctx, Row, Skip, judged
from gpu_checks_engine import CONTEXT, config_text, one_model_budget
from harness import ManagedProcess, ServerProcess

PROMPT = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
TOKENS = 128
ALL_LAYERS = "999"
# What the kit cannot bring (issue 27): packages too big to carry in 64 MiB.
NOT_RUNNABLE = (
    ("7 speech-to-text on CUDA (CTranslate2)", "faster-whisper's CUDA build needs cuDNN/cuBLAS "
     "wheels (~1 GB) and a whisper model"),
    ("7 TTS and embeddings on CUDA (onnxruntime-gpu)", "onnxruntime-gpu is ~300 MB and the "
     "models do not travel"),
    ("7 images on CUDA (stable-diffusion.cpp)", "its CUDA build is a second llama-sized "
     "compile and the model is GBs"),
    ("7 real trained GGUFs (SmolLM2, Qwen)", "98 MB+ each: synthetic weights stand in, so "
     "no output quality is checked"),
)


class GpuLlamaServer(ManagedProcess):
    """llama-server on one GGUF, every layer on the GPU, ``slots`` slots of CONTEXT tokens."""

    def __init__(self, binary: Path, weights: Path, slots: int, log_path: Path):
        super().__init__(
            lambda port: [str(binary), "-m", str(weights), "-c", str(CONTEXT * slots),
                          "--parallel", str(slots), "-ngl", ALL_LAYERS, "--host", "127.0.0.1",
                          "--port", str(port)],
            log_path, "/health", 120)


class GpuRouter(ManagedProcess):
    """llama-server in router mode over ``models_dir``, at most one model loaded, on the GPU."""

    def __init__(self, binary: Path, models_dir: Path, log_path: Path):
        super().__init__(
            lambda port: [str(binary), "--models-dir", str(models_dir), "--models-max", "1",
                          "-c", str(CONTEXT), "--parallel", "1", "-ngl", ALL_LAYERS,
                          "--host", "127.0.0.1", "--port", str(port)],
            log_path, "/health", 120)


def need_server(ctx: Ctx) -> Path:
    if ctx.llama_server is None or not ctx.llama_server.is_file():
        raise Skip(f"no llama-server binary ({ctx.llama_server})")
    return ctx.llama_server


def stopping(*procs):
    for p in procs:
        if p is not None:
            try:
                p.stop()
            except Exception:
                pass


def engine_rates(model: Path) -> tuple[float, float, str]:
    """Decode tokens/s of the same GGUF in-process, every layer on the GPU and then none."""
    import threading as th

    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import ChatRequest, LoadSpec
    rates, device = [], "?"
    for layers in (10_000, 0):
        engine = LlamaChatEngine()
        engine.load(LoadSpec(f"m-{layers}", model, context_len=CONTEXT, slots=1,
                             gpu_layers=layers))
        try:
            result = engine.chat(ChatRequest(messages=PROMPT, max_tokens=TOKENS,
                                             temperature=0.0), None, th.Event())
            rates.append(result.timings.decode_tokens_per_s)
            device = device if layers == 0 else engine.device
        finally:
            engine.unload()
    return rates[0], rates[1], device


def server_rates(base: str, extra: dict) -> tuple[float, float]:
    """(single-stream decode tokens/s as the server measured it, aggregate tokens/s of 4
    concurrent requests): bench/llama_server.py's measures, median of 3 singles. ``extra``
    goes into every request body."""
    from llama_server import aggregate_rate, chat, decode_rate
    single = statistics.median(decode_rate(chat(base, PROMPT, TOKENS, extra)) for _ in range(3))
    return single, aggregate_rate(base, TOKENS, extra)


def check_decode(ctx: Ctx) -> list[Row]:
    """4: GPU faster than CPU in-process; Hypnos >= 0.95 x llama-server single stream and
    >= 0.9 x with 4 concurrent requests, same file, both on the GPU."""
    model = ctx.models[0]
    gpu, cpu, device = engine_rates(model)
    rows = [judged("4 decode GPU vs CPU (in-process)", f"{gpu:.0f} vs {cpu:.0f} tok/s "
                   f"({device})", "GPU faster", gpu > cpu and device == "cuda")]
    binary = need_server(ctx)
    tmp = Path(tempfile.mkdtemp(prefix="decode-", dir=ctx.out))     # the logs come back
    text = config_text([model], slots=4, ids=["chat"])   # llama_server.chat asks "chat"
    (tmp / "hypnos.toml").write_text(text)
    srv = ref = None
    try:
        srv = ServerProcess(tmp / "hypnos.toml", tmp / "hypnos.log")
        h1, h4 = server_rates(srv.base, {"num_ctx": CONTEXT})
        stopping(srv)
        srv = None
        ref = GpuLlamaServer(binary, model, 4, tmp / "llama-server.log")
        r1, r4 = server_rates(ref.base, {})
    finally:
        stopping(srv, ref)
    rows += [judged("4 hypnos / llama-server, 1 stream", f"{h1:.0f} / {r1:.0f} = {h1 / r1:.2f}",
                    ">= 0.95", h1 / r1 >= 0.95, hypnos=h1, llama_server=r1),
             judged("4 hypnos / llama-server, 4 streams", f"{h4:.0f} / {r4:.0f} = {h4 / r4:.2f}",
                    ">= 0.9", h4 / r4 >= 0.9, hypnos=h4, llama_server=r4)]
    return rows


def swap_config(models: list[Path]) -> str:
    """The three models, a simulated tier 1 that holds one of them, host RAM as it is."""
    return config_text(models, vram=one_model_budget(models[0]))


def check_swap_workload(ctx: Ctx) -> list[Row]:
    """5: round-robin over three ~1 GiB models, tier 1 holding one; Hypnos's total time
    against the router's (target <= 0.5, the headline of bench/swap_workload.py)."""
    from swap_workload import one_client, pct, run_workload
    if len(ctx.models) < 3:
        raise Skip("needs three models")
    binary = need_server(ctx)
    models = ctx.models[:3]
    tmp = Path(tempfile.mkdtemp(prefix="swap-", dir=ctx.out))
    (tmp / "hypnos.toml").write_text(swap_config(models))
    ids = [f"m{i}" for i in range(3)]
    names = [m.stem for m in models]       # the router names models by file stem
    totals, results = {}, {}
    srv = router = None
    try:
        srv = ServerProcess(tmp / "hypnos.toml", tmp / "hypnos.log")
        one_client(srv.base, [(n, [PROMPT[0]]) for n in ids], 2)
        totals["hypnos"], results["hypnos"] = run_workload("a", srv.base, ids, 12, 16)
        stopping(srv)
        srv = None
        router = GpuRouter(binary, models[0].parent, tmp / "router.log")
        one_client(router.base, [(n, [PROMPT[0]]) for n in names], 2)
        totals["router"], results["router"] = run_workload("a", router.base, names, 12, 16)
    finally:
        stopping(srv, router)
    ratio = totals["hypnos"] / totals["router"]
    lat = {s: pct([r.latency_ms for r in rs], .5) for s, rs in results.items()}
    switch = [r.tele["tier_switch_latency_ms"] for r in results["hypnos"]
              if r.tele and r.tele.get("previous_tier") != "tier1_gpu_vram"]
    return [judged("5 swap round-robin hypnos/router", f"{totals['hypnos'] / 1e3:.1f} / "
                   f"{totals['router'] / 1e3:.1f} s = {ratio:.2f}", "<= 0.5", ratio <= 0.5,
                   totals_ms=totals, latency_p50_ms=lat),
            judged("5 hypnos promotion p50 (reported)", f"{pct(switch, .5):.0f} ms over "
                   f"{len(switch)} swaps", "(reported)", bool(switch))]


def check_not_runnable(ctx: Ctx) -> list[Row]:
    """7: the engines this kit cannot bring, as skipped rows with the reason."""
    return [Row(name, "-", "-", "skip", reason) for name, reason in NOT_RUNNABLE]

