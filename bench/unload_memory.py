"""Unload memory: what each allocator remedy gives back, in MiB, on the default lineup's
engines loaded and unloaded in turn.

Each variant runs in a fresh process: the scheduler with the real `MachineEffects` loads each
of SmolLM2 (llama.cpp), whisper tiny.en (CTranslate2), Kokoro and MiniLM (onnxruntime) in
turn, serves three requests from worker threads, unloads it to tier 3; ``--cycles`` rounds
after one warm-up round (the libraries' one-time cost). Printed per variant: RSS after the
warm-up round and after the last, and the growth per round. Variants:

  none        no trim (HYPNOS_MALLOC_TRIM=0), glibc's default arenas (HYPNOS_MALLOC_ARENA_MAX=0)
  arenas      arenas capped at 2, no trim
  trim        malloc_trim(0) after every unload, default arenas
  trim+arenas both (what `hypnos serve` does)
  +hugetlb    both, with glibc.malloc.hugetlb=1 (what `hypnos serve` re-executes with)
  jemalloc    libjemalloc.so.2 preloaded, no trim (only where installed)

    python bench/unload_memory.py [--cycles 5] [--only trim,none] [--models-dir models]
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import struct
import subprocess
import sys
import threading
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
VARIANTS = {
    "none": {"HYPNOS_MALLOC_TRIM": "0", "HYPNOS_MALLOC_ARENA_MAX": "0"},
    "arenas": {"HYPNOS_MALLOC_TRIM": "0", "HYPNOS_MALLOC_ARENA_MAX": "2"},
    "trim": {"HYPNOS_MALLOC_TRIM": "1", "HYPNOS_MALLOC_ARENA_MAX": "0"},
    "trim+arenas": {"HYPNOS_MALLOC_TRIM": "1", "HYPNOS_MALLOC_ARENA_MAX": "2"},
    "+hugetlb": {"HYPNOS_MALLOC_TRIM": "1", "HYPNOS_MALLOC_ARENA_MAX": "2",
                 "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "jemalloc": {"HYPNOS_MALLOC_TRIM": "0", "HYPNOS_MALLOC_ARENA_MAX": "0",
                 "LD_PRELOAD": str(JEMALLOC)},
}
MODALITIES = ("text_generation", "speech_to_text", "text_to_speech", "embeddings")


def tone_wav(secs: float = 2.0, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i * 0.05)))
                               for i in range(int(secs * rate))))
    return buf.getvalue()


def work(modality: str, engine) -> None:
    """One real request of ``modality`` (blocking; called in a worker thread)."""
    from hypnos.engines.records import ChatRequest, SpeechRequest, TranscribeRequest
    cancel = threading.Event()
    if modality == "text_generation":
        engine.chat(ChatRequest(messages=[{"role": "user", "content": "Tell me a story."}],
                                max_tokens=16), None, cancel)
    elif modality == "embeddings":
        engine.embed([f"sentence number {i}" for i in range(32)], cancel)
    elif modality == "text_to_speech":
        engine.synthesize(SpeechRequest(text="Memory that comes back."), lambda pcm: None,
                          cancel)
    else:
        engine.transcribe(TranscribeRequest(audio=tone_wav()), cancel)


def scheduler_for(modality: str, models_dir: Path):
    """A scheduler with the real `MachineEffects` holding the default lineup's model of
    ``modality`` as "m" (its ``problem`` set when its files are missing), on a simulated
    CPU-only host of 16 GiB (the budgets are not what is measured)."""
    from hypnos.catalog.catalog import load_catalog
    from hypnos.planner.types import GIB, Accelerator, Hardware, Topology
    from hypnos.service.config.lineup import default_lineup_config
    from hypnos.service.scheduling.build import build_state
    from hypnos.service.scheduling.effects import MachineEffects
    from hypnos.service.scheduling.scheduler import Scheduler
    cfg = default_lineup_config(load_catalog(), models_dir)
    m = next(x for x in cfg.models if x.modality == modality)
    m.id, cfg.models = "m", [m]
    host = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 16 * GIB, "bench", simulated=True)
    sched = Scheduler(cfg, host, MachineEffects(threads=1))
    sched.add(build_state(cfg, m))
    return sched


async def cycle(sched, modality: str) -> tuple[int, int]:
    """Load "m", serve three requests from worker threads, unload it to tier 3: (RSS
    loaded, RSS unloaded)."""
    from hypnos.planner.types import Tier
    from hypnos.service.scheduling.hardware import process_rss
    async with sched.lease("m") as lease:
        await asyncio.gather(*(asyncio.to_thread(work, modality, lease.engine)
                               for _ in range(3)))
        loaded = process_rss()
    await sched.move("m", Tier.SSD)
    return loaded, process_rss()


async def rounds(cycles: int, models_dir: Path) -> list[int]:
    """In the child: RSS after the warm-up round, then after each round."""
    from hypnos.service.scheduling.allocator import cap_arenas
    from hypnos.service.scheduling.hardware import process_rss
    cap_arenas()
    scheds = {m: scheduler_for(m, models_dir) for m in MODALITIES}
    out = []
    try:
        for _ in range(cycles + 1):
            for modality, sched in scheds.items():
                await cycle(sched, modality)
            out.append(process_rss())
    finally:
        for sched in scheds.values():
            await sched.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--only", help="comma-separated variants")
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(rounds(args.cycles, args.models_dir))))
        return
    names = args.only.split(",") if args.only else list(VARIANTS)
    print(f"{args.cycles} rounds after a warm-up round; each round loads, uses and unloads "
          f"{', '.join(MODALITIES)}")
    print(f"{'variant':<13}{'warm MiB':>10}{'end MiB':>10}{'per round':>11}{'vs none':>10}")
    base = None
    for name in names:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", **VARIANTS[name]}
        if name == "jemalloc" and not JEMALLOC.exists():
            print(f"{name:<13}not measured: {JEMALLOC} is not installed (Debian: libjemalloc2)")
            continue
        run = subprocess.run([sys.executable, __file__, "--child", "--cycles",
                              str(args.cycles), "--models-dir", str(args.models_dir)],
                             env=env, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{name:<13}failed: {run.stderr.strip().splitlines()[-1:]}")
            continue
        rss = json.loads(run.stdout.strip().splitlines()[-1])
        warm, end = rss[0] / MIB, rss[-1] / MIB
        base = end if name == "none" else base
        versus = f"{end - base:+10.0f}" if base is not None else f"{'-':>10}"
        print(f"{name:<13}{warm:>10.0f}{end:>10.0f}{(end - warm) / args.cycles:>+11.1f}"
              f"{versus}", flush=True)


if __name__ == "__main__":
    main()
