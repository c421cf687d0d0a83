"""Memory truth: for each model of the default lineup, the bytes the planner booked against
the measured growth of the server process's resident memory when the engine loaded it and
served one request, then again through tier 2 (3 -> 2, then 2 -> 1: what each step's booking
grew by, tier 1 and tier 2 together, against the RSS growth). Passes when within 5 % or
256 MiB, whichever is larger. On a GPU host
(NVML, not simulated) a model booked in VRAM is measured by the device's VRAM growth during
its load (the server's ``memory_truth.vram_growth_bytes``) instead.

    python bench/memory_truth.py [--models-dir models]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, ServerProcess  # noqa: E402

MIB = 2**20
PROBES = {  # modality -> (route, body) used to make the engine do real work once
    "text_generation": ("/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}),
    "embeddings": ("/v1/embeddings", {"input": ["Hello there.", "A second text."]}),
    "text_to_speech": ("/v1/audio/speech", {"input": "Hello from Hypnos."}),
}


def _booked(srv) -> tuple[int, int]:
    st = srv.status()
    return st["tier1_vram_used_bytes"], st["tier2_pinned_ram_used_bytes"]


def _through_tier2(srv, m: dict) -> list[tuple]:
    """The model from tier 3 to tier 2 (a chat model on a host computing from host memory
    keeps its loaded engine there, others pin their files), then to tier 1: each step's RSS
    growth against what the planner's bookings grew by. Back to tier 3 after."""
    rows = []
    before, (b1, b2) = srv.rss(), _booked(srv)
    r = srv.post("/v1/memory/tier", {"model": m["id"], "target_tier": "tier2_pinned_ram"})
    if r.status_code != 200:
        return [(m["id"] + " (3->2)", None, None, r.json()["error"]["message"])]
    grown, (a1, a2) = srv.rss() - before, _booked(srv)
    rows.append((m["id"] + " (3->2)", (a1 - b1) + (a2 - b2), grown, ""))
    before, (b1, b2) = srv.rss(), (a1, a2)
    r = srv.post("/v1/memory/tier", {"model": m["id"], "target_tier": "tier1_gpu_vram"})
    if r.status_code == 200:
        route, body = PROBES.get(m["modality"], (None, None))
        if route:
            srv.post(route, {"model": m["id"], **body}).raise_for_status()
        grown, (a1, a2) = srv.rss() - before, _booked(srv)
        rows.append((m["id"] + " (2->1)", (a1 - b1) + (a2 - b2), grown, ""))
    srv.post("/v1/memory/tier", {"model": m["id"], "target_tier": "tier3_nvme_ssd"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    args = ap.parse_args()
    from hypnos.catalog.catalog import load_catalog
    from hypnos.service.config.lineup import default_lineup_text
    tmp = Path(tempfile.mkdtemp(prefix="hypnos-bench-"))
    text = default_lineup_text(load_catalog()).replace(
        'models_dir = "models"', f'models_dir = "{args.models_dir}"')
    text = text.replace('initial_tier = "tier1_gpu_vram"', 'initial_tier = "tier3_nvme_ssd"')
    text = text.replace('initial_tier = "tier2_pinned_ram"', 'initial_tier = "tier3_nvme_ssd"')
    (tmp / "hypnos.toml").write_text(text)
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log")
    rows = []
    try:
        caps = srv.status()["capabilities"]
        gpu = caps["accelerator"] == "NvidiaCuda" and not caps["simulated"]
        for m in srv.status()["models"]:
            if m.get("problem"):
                rows.append((m["id"], None, None, m["problem"]))
                continue
            before = srv.rss()
            r = srv.post("/v1/memory/tier", {"model": m["id"], "target_tier": "tier1_gpu_vram"})
            if r.status_code != 200:
                rows.append((m["id"], None, None, r.json()["error"]["message"]))
                continue
            route, body = PROBES.get(m["modality"], (None, None))
            if route:
                srv.post(route, {"model": m["id"], **body}).raise_for_status()
            grown = srv.rss() - before
            p = r.json()["placement"]
            booked = p["vram_weight_bytes"] + p["vram_kv_and_workspace_bytes"]
            truth = next(x for x in srv.status()["models"] if x["id"] == m["id"]).get(
                "memory_truth", {})
            if gpu and booked and "vram_growth_bytes" in truth:
                grown = truth["vram_growth_bytes"]
                rows.append((m["id"] + " (VRAM)", booked, grown, ""))
            else:
                rows.append((m["id"], booked or p["pinned_ram_bytes"], grown, ""))
            srv.post("/v1/memory/tier", {"model": m["id"], "target_tier": "tier3_nvme_ssd"})
            rows += _through_tier2(srv, m)
    finally:
        srv.stop()
    print(f"{'model':<18}{'booked MiB':>12}{'growth MiB':>16}{'diff':>9}  verdict")
    for mid, booked, grown, note in rows:
        if booked is None:
            print(f"{mid:<18}{'-':>12}{'-':>16}{'-':>9}  not measured: {note}")
            continue
        diff = grown - booked
        ok = abs(diff) <= max(0.05 * abs(booked), 256 * MIB)
        print(f"{mid:<18}{booked / MIB:>12.1f}{grown / MIB:>16.1f}{diff / MIB:>+9.1f}  "
              f"{'within 5 % or 256 MiB' if ok else 'OUTSIDE the tolerance'}")


if __name__ == "__main__":
    main()
