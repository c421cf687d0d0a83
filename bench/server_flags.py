"""What each server really runs with, read from what the server itself reports: llama.cpp's
context lines in its log (both servers build their context through llama.cpp, which logs the
same lines), llama-server's ``/props`` and ``system_info`` line, Hypnos's
``/v1/memory/status`` and its process. A figure nothing reports is printed as such, never
assumed. Used by ``llama_server.py --default-model``."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

NOT_REPORTED = "not reported"


@dataclass(frozen=True)
class Flag:
    value: str
    source: str


def _field(block: str, key: str) -> str | None:
    m = re.search(rf"llama_context: {key}\s*=\s*(\S+)", block)
    return m.group(1) if m else None


def context_flags(log_text: str, slots: int) -> dict[str, Flag]:
    """The batch sizes, attention kernel, KV types and context of the last llama.cpp context
    built with ``slots`` sequences (the serving one; the last of any when none has), as
    llama.cpp logged it, and how many contexts were built in all (more than one: rebuilt)."""
    parts = log_text.split("constructing llama_context")
    blocks = parts[1:]
    if not blocks:
        return {k: Flag(NOT_REPORTED, "no llama_context lines in the log")
                for k in ("batch", "flash_attn", "kv_types", "context", "contexts", "weights")}
    serving = [i for i, b in enumerate(blocks) if _field(b, "n_seq_max") == str(slots)]
    at = serving[-1] if serving else len(blocks) - 1
    block = blocks[at]
    # The weights it serves: the last model load logged before its context.
    before = "constructing llama_context".join(parts[:at + 1])
    loaded = before.rsplit("llama_model_loader: loaded meta data", 1)[-1]
    src = "log: llama_context"
    fa = _field(block, "flash_attn") or "?"
    resolved = re.search(r"Flash Attention (enabled|not supported, set to disabled)", block)
    if resolved:
        fa += " -> " + ("enabled" if resolved.group(1) == "enabled" else "disabled")
    kv = re.search(r"llama_kv_cache: size = .*?K \((\w+)\).*?V \((\w+)\)", block)
    return {
        "batch": Flag(f"{_field(block, 'n_batch')} / {_field(block, 'n_ubatch')}", src),
        "flash_attn": Flag(fa, src + (" (flash_attn, and how auto resolved)" if resolved
                                      else " (flash_attn)")),
        "kv_types": Flag(f"{kv.group(1)} / {kv.group(2)}" if kv else NOT_REPORTED,
                         "log: llama_kv_cache"),
        "context": Flag(f"{_field(block, 'n_ctx_seq')} x {_field(block, 'n_seq_max')} = "
                        f"{_field(block, 'n_ctx')}, kv_unified {_field(block, 'kv_unified')}",
                        src + " (n_ctx_seq x n_seq_max = n_ctx)"),
        "contexts": Flag(str(len(blocks)), "log: 'constructing llama_context' lines"),
        "weights": weights_flag(loaded),
    }


def weights_flag(load_lines: str) -> Flag:
    """How the weights are held, from llama.cpp's load lines of the model the serving
    context was built on: CPU_Mapped is the file mapped, CPU the weights read into
    memory, CPU_REPACK the tensors repacked for this CPU (always in memory)."""
    found = re.findall(r"load_tensors:\s+(\S+) model buffer size\s*=\s*([\d.]+) MiB",
                       load_lines)
    if not found:
        return Flag(NOT_REPORTED, "no load_tensors lines for the serving model")
    names = {"CPU_Mapped": "mapped", "CPU": "read", "CPU_REPACK": "repacked"}
    value = ", ".join(f"{names.get(name, name)} {float(mib):.0f} MiB" for name, mib in found)
    return Flag(value, "log: load_tensors (CPU_Mapped: the file mapped; CPU: read in)")


def huge_pages(pid: int) -> Flag:
    """The process's anonymous memory in transparent huge pages (weights read in, KV cache,
    compute buffers), from /proc/PID/smaps_rollup."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return Flag(NOT_REPORTED, "/proc/PID/smaps_rollup unreadable")
    got = dict(re.findall(r"^(AnonHugePages|Anonymous):\s+(\d+) kB", text, re.M))
    if "AnonHugePages" not in got:
        return Flag(NOT_REPORTED, "/proc/PID/smaps_rollup has no AnonHugePages")
    return Flag(f"{int(got['AnonHugePages']) // 1024} of {int(got.get('Anonymous', 0)) // 1024}"
                " MiB", "/proc/PID/smaps_rollup AnonHugePages of Anonymous")


def llama_server_flags(base: str, probe_log: Path, log_path: Path, threads: int,
                       slots: int, pid: int) -> dict[str, Flag]:
    """llama-server's settings. It logs llama.cpp's context lines and its system_info only at
    verbosity 4 (trace), so ``probe_log`` is the log of a start with ``-lv 4`` and otherwise
    the same arguments; the measured one (default verbosity, ``log_path``) confirms its
    slots, context and threads, and its /props its slots, context and build."""
    probe = probe_log.read_text(errors="replace")
    flags = context_flags(probe, slots)
    for flag in ("batch", "flash_attn", "kv_types", "context", "contexts", "weights"):
        flags[flag] = Flag(flags[flag].value, flags[flag].source + " (-lv 4 start)")
    m = re.search(r"system_info: n_threads = (\d+)(?: \(n_threads_batch = (\d+)\))?", probe)
    flags["threads"] = (Flag(f"{m.group(1)} / {m.group(2) or m.group(1)}",
                             "log: system_info (-lv 4 start)")
                        if m else Flag(f"{threads} / {threads}",
                                       "its command line (-t, -tb); the log does not say"))
    served = log_path.read_text(errors="replace")
    init = re.search(r"initializing, (n_slots = \d+, n_ctx_slot = \d+, kv_unified = \S+)",
                     served)
    pool = re.search(r"threadpool init, (n_threads = \d+)", served)
    flags["served"] = Flag(", ".join(m.group(1) for m in (init, pool) if m) or NOT_REPORTED,
                           "the measured server's log: load_model, threadpool init")
    props = httpx.get(base + "/props", timeout=30).json()
    flags["slots"] = Flag(str(props.get("total_slots")), "/props total_slots")
    flags["slot_context"] = Flag(
        str(props.get("default_generation_settings", {}).get("n_ctx")),
        "/props default_generation_settings.n_ctx")
    flags["build"] = Flag(str(props.get("build_info")), "/props build_info")
    flags["huge_pages"] = huge_pages(pid)
    return flags


def hypnos_flags(base: str, log_path: Path, pid: int, model_id: str,
                 slots: int) -> dict[str, Flag]:
    """Hypnos's settings: llama.cpp's context lines in its log (``serve_llama_log.py``), the
    model's placement in /v1/memory/status, the slots its config gives, and its process's
    CPU affinity (the engine runs one thread per CPU the process may use, generation and
    batch alike: ``engines/llama/engine.py``; no config key sets it)."""
    flags = context_flags(log_path.read_text(errors="replace"), slots)
    cpus = len(os.sched_getaffinity(pid))
    flags["threads"] = Flag(f"{cpus} / {cpus}", "the server process's CPU affinity (the "
                            "engine takes one thread per CPU it may use)")
    status = httpx.get(base + "/v1/memory/status", timeout=30).json()
    model = next((m for m in status.get("models", []) if m.get("id") == model_id), {})
    placement = model.get("placement") or {}
    flags["slots"] = Flag(str(slots), "its config (slots)")
    allocated = placement.get("allocated_context_len")
    flags["slot_context"] = Flag(
        f"{allocated // slots}" if isinstance(allocated, int) else NOT_REPORTED,
        f"/v1/memory/status allocated_context_len {allocated} / slots, "
        f"tier {model.get('current_tier')}")
    import llama_cpp
    flags["build"] = Flag(f"llama-cpp-python {llama_cpp.__version__}",
                          "the engine's bindings, imported here (same environment)")
    flags["huge_pages"] = huge_pages(pid)
    return flags


ROWS = (("threads", "threads (gen / batch)"), ("batch", "n_batch / n_ubatch"),
        ("flash_attn", "flash attention"), ("kv_types", "KV cache K / V"),
        ("slots", "slots"), ("slot_context", "context per slot"),
        ("context", "llama.cpp context"), ("contexts", "contexts built"),
        ("weights", "weights"), ("huge_pages", "anon huge pages"),
        ("served", "as it served"), ("build", "build"))


def print_flags(hyp: dict[str, Flag], ref: dict[str, Flag]) -> None:
    """Every flag of both servers, each with how it was obtained."""
    print(f"{'':24}{'hypnos':40}llama-server")
    for key, label in ROWS:
        h, r = hyp.get(key), ref.get(key)
        print(f"  {label:22}{(h.value if h else '-'):40}{r.value if r else '-'}")
    print("how each was obtained:")
    for key, label in ROWS:
        h, r = hyp.get(key), ref.get(key)
        print(f"  {label:22}hypnos: {h.source if h else '-'}; "
              f"llama-server: {r.source if r else '-'}")
