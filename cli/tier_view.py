"""The three tiers as a picture for the terminal, drawn from a GET /v1/memory/status body.

Pure rendering: ``tier_picture(status)`` returns a rich renderable and does no I/O, so the
tests print it into a string console.
"""
from __future__ import annotations

import time

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

BAR = 40
# Tier 1 is where the engines compute from: VRAM beside a GPU, else the host's memory (the
# wire name stays tier1_gpu_vram everywhere; capabilities.accelerator says which).
TIER1_TITLES = {"NvidiaCuda": "Tier 1  GPU memory (VRAM)",
                "AppleMetal": "Tier 1  unified memory the GPU computes from",
                "Cpu": "Tier 1  host memory the engines compute from (no GPU)"}
TIER_TITLES = {"tier1_gpu_vram": "Tier 1  GPU memory (VRAM)",
               "tier2_pinned_ram": "Tier 2  pinned host memory (RAM)",
               "tier3_nvme_ssd": "Tier 3  disk (SSD)"}


def gib(n: int | float | None) -> str:
    return "-" if n is None else f"{n / 1024**3:.2f} GiB"


def bar(label: str, used: int, total: int | None, style: str) -> Text:
    """``label [#####.....]  1.20 GiB / 2.00 GiB  60%``; no total: the size alone."""
    text = Text(f"{label:<9}")
    if not total:
        return text.append(gib(used))
    frac = max(0.0, min(1.0, used / total))
    full = round(frac * BAR)
    text.append("[").append("#" * full, style=style).append("." * (BAR - full)).append("]")
    return text.append(f"  {gib(used)} / {gib(total)}  {frac:.0%}")


def _layers(p: dict) -> str:
    parts = [f"{p.get('gpu_layers', 0)} gpu", f"{p.get('pinned_ram_layers', 0)} ram",
             f"{p.get('ssd_layers', 0)} ssd"]
    if p.get("cpu_expert_layers"):
        parts.append(f"{p['cpu_expert_layers']} experts cpu")
    remote = sum(share.get("layers", 0) for share in p.get("rpc_workers") or [])
    if remote:
        parts.append(f"{remote} rpc")
    return " / ".join(parts)


def _rpc_workers(workers: list[dict]) -> Table:
    """One row per RPC worker: whether it answers, the model on it, its bytes."""
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("worker", "answers", "model", "layers", "booked", "budget"):
        table.add_column(col, no_wrap=col == "worker")
    for w in workers:
        answers = {True: "yes", False: "no", None: "?"}[w.get("answers")]
        if w.get("error"):
            answers += f" ({w['error']})"
        table.add_row(w["endpoint"], answers, w.get("model") or "-", str(w.get("layers", 0)),
                      gib(w.get("booked_bytes", 0)), gib(w.get("budget_bytes", 0)))
    return table


def _models_table(models: list[dict]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("model", "serves", "layers", "bytes here", "context", "leases", "queued",
                "priority"):
        table.add_column(col, justify="right" if col in ("leases", "queued") else "left",
                         no_wrap=col in ("model", "layers"))
    for m in models:
        p = m.get("placement") or {}
        here = {"tier1_gpu_vram": p.get("vram_weight_bytes", 0)
                + p.get("vram_kv_and_workspace_bytes", 0),
                "tier2_pinned_ram": p.get("pinned_ram_bytes", 0)}.get(
                    m.get("current_tier"), m.get("total_weight_bytes", 0))
        name = m["id"] + ("" if m.get("enabled", True) else " (disabled)")
        if m.get("problem"):
            name += " (problem)"
        table.add_row(name, ", ".join(m.get("modalities") or [m.get("modality", "")]),
                      _layers(p), gib(here), str(p.get("allocated_context_len") or "-"),
                      str(m.get("active_leases", 0)), str(m.get("queued", 0)),
                      str(m.get("priority", "")))
        if m.get("draft"):
            table.add_row(*_draft_row(m["draft"], m.get("current_tier")))
    return table


def _draft_row(d: dict, tier: str | None) -> tuple[str, ...]:
    """The row under a target for its speculative drafter: its id, who shares its weights,
    its KV and its weights + KV as booked (tier 1), its weights (tier 2 booked, tier 3 on
    disk)."""
    label = "MTP heads" if d.get("kind") == "mtp" else f"draft {d.get('id', '?')}"
    shared = d.get("shared_with") or []
    serves = f"shared: {', '.join(shared)}" if shared else "speculative"
    weights, kv = d.get("weights_booked_bytes", 0), d.get("kv_bytes", 0)
    if tier == "tier1_gpu_vram":
        layers, here = f"kv {gib(kv)}", weights + kv
    elif tier == "tier2_pinned_ram":
        layers, here = "-", weights
    else:
        layers, here = "-", d.get("weights_bytes", 0)
    if d.get("in_target_file"):
        layers = f"in its file, kv {gib(kv)}"
    return f"  └ {label}", serves, layers, gib(here), "-", "", "", ""


def _tier_bars(status: dict, tier: str) -> list[Text]:
    caps = status.get("capabilities", {})
    if tier == "tier1_gpu_vram":
        real_total = status.get("tier1_vram_real_total_bytes")
        real_used = (real_total - status.get("tier1_vram_real_free_bytes", 0)
                     if real_total else 0)
        return [bar("booked", status.get("tier1_vram_used_bytes", 0),
                    caps.get("usable_vram_budget_bytes"), "cyan"),
                bar("real", real_used, real_total, "magenta")]
    if tier == "tier2_pinned_ram":
        return [bar("booked", status.get("tier2_pinned_ram_used_bytes", 0),
                    caps.get("pinned_ram_budget_bytes"), "cyan"),
                bar("process", status.get("process_memory_bytes") or 0,
                    status.get("process_memory_cap_bytes") or caps.get("physical_memory_bytes"),
                    "magenta")]
    on_disk = sum(m.get("total_weight_bytes", 0) for m in status.get("models", [])
                  if m.get("current_tier") == tier)
    return [bar("weights", on_disk, None, "cyan")]


def _evictions(status: dict, now_ms: float, limit: int = 5) -> list[Text]:
    out = []
    for e in status.get("recent_evictions", [])[:limit]:
        ago = (now_ms - e["unix_ms"]) / 1000 if e.get("unix_ms") else None
        when = f"{ago:.0f}s ago " if ago is not None else ""
        out.append(Text(f"  {when}{e.get('model')} -> {e.get('to_tier')} for "
                        f"{e.get('for_model')} ({e.get('reason')})"))
    return out or [Text("  none")]


def tier_picture(status: dict, now_ms: float | None = None) -> Group:
    """Header, one panel per tier (bars for booked vs real bytes, the models placed there
    with their layers and leases), KV parking, the recent evictions."""
    caps = status.get("capabilities", {})
    device = caps.get("device_name") or caps.get("accelerator", "?")
    head = Text(f"{device}  ({caps.get('accelerator', '?')}"
                f"{', simulated budget' if caps.get('simulated') else ''})", style="bold")
    parts: list = [head]
    models = status.get("models", [])
    for tier, title in TIER_TITLES.items():
        if tier == "tier1_gpu_vram":
            title = TIER1_TITLES.get(caps.get("accelerator", ""), title)
        here = [m for m in models if m.get("current_tier") == tier]
        body: list = list(_tier_bars(status, tier))
        body.append(_models_table(here) if here else Text("no model", style="dim"))
        parts.append(Panel(Group(*body), title=title, title_align="left"))
    if status.get("rpc_workers"):
        parts.append(Panel(_rpc_workers(status["rpc_workers"]), title="RPC workers",
                           title_align="left"))
    kv = status.get("kv_park")
    if kv:
        state = "on" if kv.get("enabled") else "off"
        parked = ", ".join(f"{p['model']} ({p['tokens']} tokens)" for p in kv.get("models", []))
        parts.append(Text(f"KV parking {state}: {gib(kv.get('used_bytes', 0))} of "
                          f"{gib(kv.get('max_bytes'))}" + (f"; parked {parked}" if parked
                                                          else "")))
    cache = status.get("prompt_cache")
    if cache:
        parts.append(_prompt_cache(cache))
    parts.append(Text("Recent evictions:"))
    parts += _evictions(status, now_ms if now_ms is not None else time.time() * 1000)
    return Group(*parts)


def _prompt_cache(cache: dict) -> Text:
    """One line for the prompt cache, then one per model: entries, bytes, hits, misses."""
    if not cache.get("enabled"):
        return Text("Prompt cache off")
    lines = [f"Prompt cache: {cache.get('entries', 0)} entries, RAM "
             f"{gib(cache.get('ram_bytes', 0))} of {gib(cache.get('ram_max_bytes'))}, disk "
             f"{gib(cache.get('disk_bytes', 0))} of {gib(cache.get('disk_max_bytes'))}"]
    for m in cache.get("models", []):
        ram, disk = m.get("ram", {}), m.get("disk", {})
        lines.append(f"  {m.get('model')}: RAM {ram.get('entries', 0)} entries "
                     f"({ram.get('hits', 0)} hits), disk {disk.get('entries', 0)} entries "
                     f"({disk.get('hits', 0)} hits), {m.get('misses', 0)} misses")
    return Text("\n".join(lines))
