"""Which engine kinds can compute on which accelerator, and the device a placement runs on.

Pure data and decisions; what the installed builds really support is probed outside the
planner (``hypnos.engines.devices``) and passed in as a set of engine kinds.
"""
from __future__ import annotations

from hypnos.planner.types import Accelerator, Hardware, Placement, Topology

# Engine kinds whose forward passes can run on each accelerator when their library is built
# for it: llama.cpp (CUDA or Metal), CTranslate2 (CUDA only), onnxruntime-gpu (CUDA; the
# CoreML provider is not used), stable-diffusion.cpp (CUDA or Metal). docling-slim and
# GLiNER (CPU torch) always run on the host.
ACCELERATED_ENGINES: dict[Accelerator, frozenset[str]] = {
    Accelerator.NVIDIA: frozenset({"ggml_llama", "faster_whisper", "onnx_runtime",
                                   "ggml_diffusion"}),
    Accelerator.METAL: frozenset({"ggml_llama", "ggml_diffusion"}),
    Accelerator.CPU: frozenset(),
}

# Placement.device per accelerator, for a placement with something on the GPU.
DEVICE_NAMES = {Accelerator.NVIDIA: "cuda", Accelerator.METAL: "metal", Accelerator.CPU: "cpu"}


def can_accelerate(engine: str, hw: Hardware) -> bool:
    """Whether an engine kind can run on ``hw``'s accelerator when built for it."""
    return engine in ACCELERATED_ENGINES.get(hw.accelerator, frozenset())


def placement_device(placement: Placement, hw: Hardware, accelerated: bool) -> str:
    """The device a placement computes on: "cpu" for a host placement, on a CPU-only host or
    for an engine that cannot use the accelerator; else the accelerator's ("cuda",
    "metal"). A layer split counts as the GPU's (its first layers run there)."""
    if placement.on_host or not accelerated or hw.topology is Topology.CPU_ONLY:
        return "cpu"
    if hw.topology is Topology.DISCRETE and placement.booked_tier1_bytes == 0:
        return "cpu"
    return DEVICE_NAMES[hw.accelerator]
