"""The tier picture drawn from a status body shaped like spec section 14's example."""
import io

from rich.console import Console

from hypnos.cli.tier_view import BAR, tier_picture

GIB = 1024**3


def placement(tier, gpu=0, ram=0, ssd=0, vram=0, kv=0, pinned=0, ctx=0, experts=0):
    return {"primary_tier": tier, "gpu_layers": gpu, "pinned_ram_layers": ram, "ssd_layers": ssd,
            "vram_weight_bytes": vram, "vram_kv_and_workspace_bytes": kv,
            "pinned_ram_bytes": pinned, "allocated_context_len": ctx, "cpu_expert_layers": experts}


STATUS = {
    "capabilities": {"accelerator": "NvidiaCuda", "device_name": "RTX 5090",
                     "usable_vram_budget_bytes": 24 * GIB, "pinned_ram_budget_bytes": 32 * GIB,
                     "physical_memory_bytes": 64 * GIB, "simulated": False},
    "tier1_vram_used_bytes": 12 * GIB, "tier1_vram_real_total_bytes": 24 * GIB,
    "tier1_vram_real_free_bytes": 6 * GIB, "tier2_pinned_ram_used_bytes": 8 * GIB,
    "process_memory_bytes": 16 * GIB, "process_memory_cap_bytes": None,
    "models": [
        {"id": "gemma", "modality": "text_generation", "modalities": ["text_generation", "vision"],
         "current_tier": "tier1_gpu_vram", "total_weight_bytes": 10 * GIB, "priority": "high",
         "active_leases": 2, "queued": 1, "enabled": True,
         "placement": placement("tier1_gpu_vram", gpu=20, ram=10, vram=10 * GIB, kv=2 * GIB,
                                ctx=16384, experts=4)},
        {"id": "kokoro", "modality": "text_to_speech", "current_tier": "tier2_pinned_ram",
         "total_weight_bytes": GIB, "priority": "normal", "active_leases": 0, "enabled": True,
         "placement": placement("tier2_pinned_ram", pinned=GIB)},
        {"id": "moss-image", "modality": "image_generation", "current_tier": "tier3_nvme_ssd",
         "total_weight_bytes": 6 * GIB, "priority": "low", "enabled": False,
         "placement": placement("tier3_nvme_ssd", ssd=40)},
    ],
    "kv_park": {"enabled": True, "max_bytes": 4 * GIB, "used_bytes": GIB // 2,
                "models": [{"model": "gemma", "slots": 1, "tokens": 12612, "bytes": GIB // 2,
                            "parked_secs_ago": 4.2}]},
    "recent_evictions": [{"model": "moss-image", "for_model": "gemma", "reason": "memory_budget",
                          "to_tier": "tier3_nvme_ssd", "unix_ms": 1_000_000}],
}


def render(status) -> str:
    console = Console(width=140, no_color=True, record=True, file=io.StringIO())
    console.print(tier_picture(status, now_ms=1_012_000))
    return console.export_text()


def test_each_model_is_drawn_in_its_tier_with_layers_and_leases():
    text = render(STATUS)
    tier1, rest = text.split("Tier 2")
    tier2, tier3 = rest.split("Tier 3")
    assert "gemma" in tier1 and "20 gpu / 10 ram / 0 ssd / 4 experts cpu" in tier1
    assert "12.00 GiB" in tier1 and "16384" in tier1 and "text_generation, vision" in tier1
    row = next(line for line in tier1.splitlines() if "gemma" in line).split()
    assert row[-4:-1] == ["2", "1", "high"]            # leases, queued, priority; the frame
    assert "kokoro" in tier2 and "1.00 GiB" in tier2
    assert "moss-image (disabled)" in tier3 and "6.00 GiB" in tier3


def test_bars_show_booked_against_real_bytes():
    text = render(STATUS)
    booked = next(line for line in text.splitlines() if "booked" in line and "24.00" in line)
    assert "#" * (BAR // 2) + "." * (BAR // 2) in booked and "50%" in booked
    real = next(line for line in text.splitlines() if "real" in line)
    assert "18.00 GiB / 24.00 GiB  75%" in real             # total - free
    assert "8.00 GiB / 32.00 GiB  25%" in text              # tier 2 booked


def test_evictions_and_kv_parking_are_listed():
    text = render(STATUS)
    assert "12s ago moss-image -> tier3_nvme_ssd for gemma (memory_budget)" in text
    assert "KV parking on: 0.50 GiB of 4.00 GiB; parked gemma (12612 tokens)" in text
    assert "none" in render({**STATUS, "recent_evictions": []}).split("Recent evictions:")[1]


def test_tier1_is_named_for_the_memory_the_engines_compute_from():
    assert "Tier 1  GPU memory (VRAM)" in render(STATUS)
    cpu = {**STATUS, "capabilities": {**STATUS["capabilities"], "accelerator": "Cpu"}}
    text = render(cpu)
    assert "Tier 1  host memory the engines compute from (no GPU)" in text
    assert "VRAM" not in text.split("Tier 2")[0]


def test_rpc_workers_are_drawn_with_the_split_models_layers():
    split = dict(STATUS["models"][0], id="big")
    split["placement"] = dict(placement("tier1_gpu_vram", gpu=10, vram=GIB),
                              rpc_workers=[{"endpoint": "10.0.0.2:50052", "first_layer": 10,
                                            "layers": 20, "booked_bytes": 3 * GIB,
                                            "output_head": True}])
    status = dict(STATUS, models=[split], rpc_workers=[
        {"endpoint": "10.0.0.2:50052", "answers": True, "model": "big", "layers": 20,
         "booked_bytes": 3 * GIB, "budget_bytes": 8 * GIB},
        {"endpoint": "10.0.0.3:50052", "answers": False, "error": "connection refused",
         "model": None, "layers": 0, "booked_bytes": 0, "budget_bytes": 0}])
    text = render(status)
    assert "10 gpu / 0 ram / 0 ssd / 20 rpc" in text
    workers = text.split("RPC workers")[1]
    first = next(line for line in workers.splitlines() if "10.0.0.2:50052" in line)
    assert "yes" in first and "big" in first and "3.00 GiB" in first and "8.00 GiB" in first
    assert "no (connection refused)" in workers


def test_a_targets_draft_is_drawn_under_it_with_who_shares_it():
    """Issue 30: the draft travels with its target; shared weights name the other target."""
    def target(mid, tier, draft):
        return {"id": mid, "modality": "text_generation", "current_tier": tier,
                "total_weight_bytes": 2 * GIB, "priority": "normal", "enabled": True,
                "placement": placement(tier, gpu=28, vram=2 * GIB, kv=GIB, ctx=8192),
                "draft": draft}
    draft = {"id": "qwen-0.5b", "kind": "draft", "tier": "tier1_gpu_vram",
             "in_target_file": False, "weights_bytes": GIB // 2,
             "weights_booked_bytes": GIB // 2, "kv_bytes": GIB // 4, "in_tier1_budget": True}
    cold = dict(draft, tier="tier3_nvme_ssd", weights_booked_bytes=0, kv_bytes=0,
                shared_with=[])
    status = dict(STATUS, models=[
        target("coder-a", "tier1_gpu_vram", dict(draft, shared_with=["coder-b"])),
        target("coder-b", "tier1_gpu_vram", dict(draft, shared_with=["coder-a"])),
        target("coder-c", "tier3_nvme_ssd", cold)])
    text = render(status)
    tier1, rest = text.split("Tier 2")
    lines = tier1.splitlines()
    a = next(i for i, line in enumerate(lines) if "coder-a" in line and "└" not in line)
    under = lines[a + 1]
    assert "└ draft qwen-0.5b" in under and "shared: coder-b" in under
    assert "kv 0.25 GiB" in under and "0.75 GiB" in under       # weights + KV booked
    assert "shared: coder-a" in tier1
    tier3 = rest.split("Tier 3")[1]
    cold_line = next(line for line in tier3.splitlines() if "└ draft qwen-0.5b" in line)
    assert "speculative" in cold_line and "0.50 GiB" in cold_line
    mtp = dict(draft, kind="mtp", id="mtp", in_target_file=True, weights_booked_bytes=0,
               shared_with=[])
    text = render(dict(STATUS, models=[target("qwen3.5", "tier1_gpu_vram", mtp)]))
    assert "└ MTP heads" in text and "in its file, kv 0.25 GiB" in text


def test_the_prompt_cache_is_listed_per_model():
    cache = {"enabled": True, "entries": 3, "ram_bytes": GIB // 4, "ram_max_bytes": 2 * GIB,
             "disk_bytes": GIB, "disk_max_bytes": 4 * GIB,
             "models": [{"model": "gemma", "misses": 2, "ram": {"entries": 1, "hits": 5},
                         "disk": {"entries": 3, "hits": 1}}]}
    text = render({**STATUS, "prompt_cache": cache})
    assert "Prompt cache: 3 entries, RAM 0.25 GiB of 2.00 GiB, disk 1.00 GiB of 4.00 GiB" in text
    assert "gemma: RAM 1 entries (5 hits), disk 3 entries (1 hits), 2 misses" in text
    assert "Prompt cache off" in render({**STATUS, "prompt_cache": {"enabled": False}})
