"""The server's prompt cache (`engines.llama.prompt_cache.PromptCache`): built from the
config (``hardware.prompt_cache*``), its files under ``<server.state_dir>/prompt-cache``; the
scheduler books its RAM tier in tier 2, `MachineEffects` hands it to every chat engine it
loads, /v1/memory/status, ``hypnos tier`` and /metrics report it."""
from __future__ import annotations

from pathlib import Path

from hypnos.engines.llama.prompt_cache import PromptCache
from hypnos.planner.budgets import prompt_cache_caps
from hypnos.planner.types import Hardware
from hypnos.service.config.schema import Config

FOLDER = "prompt-cache"


def build_prompt_cache(config: Config, hardware: Hardware,
                       state_dir: Path | None) -> PromptCache | None:
    """The prompt cache the config asks for (None when hardware.prompt_cache is off);
    ``state_dir`` None: RAM only. Creates nothing on disk before first use."""
    hw = config.hardware
    if not hw.prompt_cache:
        return None
    ram, disk = prompt_cache_caps(hw.prompt_cache_ram_bytes, hw.prompt_cache_disk_bytes,
                                  hardware.ram_bytes)
    folder = state_dir / FOLDER if state_dir is not None else None
    return PromptCache(ram, disk if folder is not None else 0, folder,
                       max_age_secs=hw.prompt_cache_max_age_secs)


def snapshot(cache: PromptCache | None, sees_all: bool) -> dict:
    """/v1/memory/status's ``prompt_cache``: totals per model and tier for every key; each
    entry (its partition and session) for a key that sees all only."""
    if cache is None:
        return {"enabled": False}
    return cache.snapshot(entries=sees_all)
