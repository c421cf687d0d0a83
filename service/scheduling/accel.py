"""Which engines really compute on the GPU here: the build probe at start-up, the engine kinds
the scheduler may book VRAM for, the one start-up warning, and the ``backend`` /
``accelerator`` fields of ``/health`` and ``/v1/models``.

Honesty rules (issue 17): NVML seeing a GPU is not enough; an engine books VRAM only when its
installed build can use the GPU (``engines.devices``). On a simulated machine
(``[hardware.simulate]``) the planner budgets as if the builds matched the simulated
accelerator, while ``accelerator`` still says what this process really does.
"""
from __future__ import annotations

import logging

from hypnos.engines.protocols import ReportsDevice
from hypnos.engines.devices import EngineBuild, probe_builds
from hypnos.planner import ACCELERATED_ENGINES
from hypnos.planner.types import Accelerator, Hardware
from hypnos.service.scheduling import hardware as hw_probe

log = logging.getLogger("hypnos.accel")
ENGINE_KINDS = ("ggml_llama", "faster_whisper", "onnx_runtime", "ggml_diffusion", "docling",
                "gliner")


def engine_builds(hardware: Hardware) -> dict[str, EngineBuild]:
    """Every engine kind's build, probed for a GPU when this host has one (on a simulated
    machine: when the real host has one). Blocks (library imports, on a GPU host only)."""
    if hardware.simulated:
        gpu = hw_probe.real_gpu_present()
    else:
        gpu = hardware.accelerator is not Accelerator.CPU
    return probe_builds(ENGINE_KINDS, gpu)


def accelerated_engines(hardware: Hardware, builds: dict[str, EngineBuild]) -> frozenset[str]:
    """The engine kinds the scheduler may place on the GPU: on a simulated machine every kind
    that can run on its accelerator; else those whose build can use this one."""
    can = ACCELERATED_ENGINES[hardware.accelerator]
    if hardware.simulated:
        return can
    return frozenset(k for k, b in builds.items() if b.accelerated) & can


def unusable_gpu_warning(hardware: Hardware, builds: dict[str, EngineBuild],
                         engines) -> str | None:
    """The start-up warning when the host's GPU is one that configured engines could use but
    whose installed builds cannot (None when there is nothing to say)."""
    if hardware.simulated or hardware.accelerator is Accelerator.CPU:
        return None
    can = ACCELERATED_ENGINES[hardware.accelerator]
    lacking = [(k, builds[k]) for k in dict.fromkeys(engines)
               if k in can and k in builds and builds[k].installed and not builds[k].accelerated]
    if not lacking:
        return None
    what = "; ".join(f"{b.library} ({k}: {b.evidence}; fix: {b.fix})" for k, b in lacking)
    return (f"{hardware.device_name or 'a GPU'} is present, but these engine builds cannot use "
            f"it, so their models run on the CPU from host memory and book no VRAM: {what}")


def warn_once(hardware: Hardware, builds: dict[str, EngineBuild], engines) -> str | None:
    message = unusable_gpu_warning(hardware, builds, engines)
    if message:
        log.warning("%s", message)
    return message


def backend_of(builds: dict[str, EngineBuild]) -> str:
    """The top-level ``backend``: what llama.cpp (the chat engine run.sh builds) was compiled
    with: cuda, metal or cpu."""
    llama = builds.get("ggml_llama")
    return llama.backend if llama is not None and llama.installed else "cpu"


def status_fields(sched, builds: dict[str, EngineBuild]) -> dict:
    """``backend``, ``accelerator`` (false when every forward pass of the models in service
    runs on the host) and each configured engine kind's build."""
    kinds = list(dict.fromkeys(st.cfg.engine for st in sched.models.values() if st.enabled))
    accelerated = any(builds[k].accelerated for k in kinds if k in builds)
    return {"backend": backend_of(builds), "accelerator": accelerated,
            "engines": {k: builds[k].to_wire() for k in kinds if k in builds}}


def model_device(st, placement) -> str:
    """Where a model computes: what its loaded engine reports (llama.cpp's offloaded layers,
    the onnxruntime session's provider, CTranslate2's device), else the placement's plan."""
    device = st.engine.device if isinstance(st.engine, ReportsDevice) else None
    return device or placement.device or "cpu"
