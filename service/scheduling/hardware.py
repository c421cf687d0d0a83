"""Probe what this host is (NVIDIA through NVML, Apple unified memory, or CPU only) and read
live memory figures. The pure planner gets the result as a `Hardware` record."""
from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from hypnos.planner.types import Accelerator, Hardware, Topology
from hypnos.service.config.schema import SimulateConfig


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes (empty off Linux)."""
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, rest = line.split(":", 1)
            parts = rest.split()
            out[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except (OSError, ValueError, IndexError):
        pass
    return out


def cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 1 << 60:
            return int(raw)
    return None


def physical_memory() -> int:
    total = meminfo().get("MemTotal")
    if total is None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return total


def usable_memory() -> int:
    """Physical memory, or the cgroup limit when that is lower."""
    limit = cgroup_limit()
    total = physical_memory()
    return min(total, limit) if limit else total


def available_memory() -> int:
    info = meminfo()
    return info.get("MemAvailable", info.get("MemFree", 0))


def process_rss() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class GpuSample:
    total: int
    free: int
    name: str
    stats: dict


def _process_vram(pynvml, handle) -> int | None:
    """VRAM this process holds on the device, where the driver reports it (not inside a PID
    namespace it cannot see into, not on every platform)."""
    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # noqa: BLE001 - unsupported on this device or driver
        return None
    for proc in procs:
        if proc.pid == os.getpid() and isinstance(proc.usedGpuMemory, int):
            return proc.usedGpuMemory
    return None


def vram_used() -> tuple[int, int | None] | None:
    """(device memory in use, this process's share or None) through NVML; None without a
    GPU. Blocks for the NVML calls (milliseconds)."""
    gpu = nvml_sample()
    if gpu is None:
        return None
    return gpu.total - gpu.free, gpu.stats.get("process_vram_bytes")


def nvml_sample() -> GpuSample | None:
    """First NVIDIA GPU through NVML, or None (no driver, no GPU, no library)."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # pynvml.NVMLError and ImportError alike: no NVIDIA device here
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        name = pynvml.nvmlDeviceGetName(h)
        stats = {"sampled_unix_ms": int(time.time() * 1000)}
        for key, fn in (("utilization_percent",
                         lambda: pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                        ("temperature_celsius", lambda: pynvml.nvmlDeviceGetTemperature(h, 0)),
                        ("power_watts", lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                        ("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, 1)),
                        ("throttle_reasons",
                         lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))):
            try:
                stats[key] = fn()
            except Exception:  # a field this device does not report stays out
                pass
        own = _process_vram(pynvml, h)
        if own is not None:
            stats["process_vram_bytes"] = own
        if "throttle_reasons" in stats:
            stats["throttled"] = stats["throttle_reasons"] not in (0, 1)
        return GpuSample(mem.total, mem.free, name if isinstance(name, str) else name.decode(),
                         stats)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def real_gpu_present() -> bool:
    """Whether this host has a GPU the engines could use (NVML sees one, or Apple Silicon),
    whatever ``[hardware.simulate]`` says."""
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return True
    return nvml_sample() is not None


def probe(simulate: SimulateConfig | None = None) -> Hardware:
    """This host as the planner sees it; ``simulate`` replaces the memory figures."""
    if simulate is not None:
        unified = simulate.unified_memory
        if unified:
            topo, acc = Topology.UNIFIED, Accelerator.METAL
        elif simulate.vram_bytes:
            topo, acc = Topology.DISCRETE, Accelerator.NVIDIA
        else:
            topo, acc = Topology.CPU_ONLY, Accelerator.CPU
        return Hardware(acc, topo, 0 if unified else simulate.vram_bytes,
                        simulate.ram_bytes or usable_memory(), "simulated", simulated=True)
    gpu = nvml_sample()
    if gpu is not None:
        return Hardware(Accelerator.NVIDIA, Topology.DISCRETE, gpu.total, usable_memory(),
                        gpu.name)
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return Hardware(Accelerator.METAL, Topology.UNIFIED, 0, usable_memory(), "Apple GPU")
    return Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, usable_memory(),
                    platform.processor() or platform.machine())
