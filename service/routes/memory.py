"""GET /v1/memory/status and POST /v1/memory/tier (spec section 14)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines.devices import llama_has_rpc
from hypnos.engines.protocols import OffloadsLayers, SplitsLayers
from hypnos.planner.types import Tier
from hypnos.service import errors
from hypnos.service.scheduling.accel import model_device
from hypnos.service.config.schema import PROFILES
from hypnos.service.scheduling.hardware import available_memory, nvml_sample, physical_memory
from hypnos.service.wire.body import read_body
from hypnos.service.observe.record import record_of
from hypnos.service.wire.model import Says, Wire, refuse
from hypnos.service.scheduling import prompt_cache
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.rpc_workers import STATUS_PROBE_AGE_S
from hypnos.service.http.openapi import admin_only, endpoint, needs_ready
from hypnos.service.state import state, state_of
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.planner.types import Placement

bp = Blueprint("memory")


def _capabilities(sched: Scheduler) -> dict:
    hw, b = sched.hardware, sched.budgets
    return {"accelerator": str(hw.accelerator), "topology": str(hw.topology),
            "device_name": hw.device_name,
            "total_vram_bytes": hw.vram_bytes if not hw.unified else hw.ram_bytes,
            "usable_vram_budget_bytes": b.tier1_bytes,
            "pinned_ram_budget_bytes": b.tier2_bytes,
            "physical_memory_bytes": hw.ram_bytes, "simulated": hw.simulated,
            "installed_memory_bytes": physical_memory()}


def _model(sched: Scheduler, st: ModelState) -> dict:
    placement = sched.placement_of(st)
    out = {
        "id": st.id, "enabled": st.enabled, "modality": st.cfg.modality,
        "modalities": st.cfg.all_modalities, "engine": st.cfg.engine,
        "total_weight_bytes": st.weight_bytes, "priority": str(st.cfg.priority),
        "current_tier": str(st.tier), "placement": placement.to_wire(),
        # Where its forward passes run: the loaded engine's own report, else the plan.
        "device": model_device(st, placement),
        "moe_offload": str(st.cfg.moe_offload), "expert_bytes": st.shape.expert_bytes,
        # Requests admitted plus holds (a session watch, a prompt being counted).
        "active_leases": st.leases + st.holds, "idle_seconds": round(st.idle_seconds(), 1),
        # Queue depth for the playground: admitted requests still waiting for a slot.
        "slots": st.cfg.slots, "queued": st.waiting, "running": st.running,
        "total_requests_served": st.stats.served,
        "requests_per_minute": round(st.stats.requests_per_minute(), 3),
        "reload_estimate_ms": round(st.reload_estimate_ms(), 1),
        "estimated_wait_ms": st.estimated_wait_ms(),
        "pinned_in_ram": st.pinned is not None,
        "ram_locked": bool(getattr(st.pinned, "locked", False)),
    }
    if st.stats.service_ms is not None:
        out["service_ms"] = round(st.stats.service_ms, 1)
    if sched.pool.is_changing(st.id):
        out["changing"] = True     # a PUT / DELETE drains it; new requests wait
    if st.problem:
        out["problem"] = st.problem
    if st.booked_vs_real is not None:
        out["memory_truth"] = st.booked_vs_real
    if isinstance(st.engine, OffloadsLayers):   # llama.cpp: the layers it put on the GPU
        out["offloaded_layers"] = st.engine.offloaded_layers
    if isinstance(st.engine, SplitsLayers) and st.engine.split_layers:
        out["split_layers"] = st.engine.split_layers   # the layers llama.cpp put on each
    if st.shape.draft is not None:
        out["draft"] = _draft(sched, st, placement)
    return out


def _draft(sched: Scheduler, st: ModelState, placement: Placement) -> dict:
    """The speculative drafter booked with ``st`` (issue 30); it moves between tiers with
    its target (``tier``). ``weights_bytes``: its tensors (MTP heads inside the target's
    file: ``in_target_file``, booked with the target's weights); ``weights_booked_bytes`` and
    ``kv_bytes``: what is booked for it now (tier 1: the placement's, ``in_tier1_budget``
    False for a host placement; tier 2: its file when pinned with the target's, no KV);
    ``shared_with``: the other tier-1 targets sharing one load of its weights (tier 1 then
    books them once)."""
    draft = st.shape.draft
    assert draft is not None
    resident = st.tier is Tier.GPU and st.placement is not None
    key = draft.share_key
    shared = sorted(m.id for m in sched.models.values()
                    if resident and key and m is not st and m.tier is Tier.GPU
                    and m.placement is not None and m.placement.draft_share_key == key)
    if resident:
        weights, kv = placement.draft_weight_bytes, placement.draft_kv_bytes
    else:
        file = st.paths.get("draft_path") or st.paths.get("mtp_path")
        pinned = st.tier is Tier.RAM and file in getattr(st.pinned, "files", ())
        weights, kv = (draft.booked_weights_bytes if pinned else 0), 0
    return {"id": draft.model_id, "kind": draft.kind, "tier": str(st.tier),
            "in_target_file": draft.in_target, "weights_bytes": draft.weights_bytes,
            "weights_booked_bytes": weights, "kv_bytes": kv,
            "in_tier1_budget": resident and placement.draft_in_tier1,
            "shared_with": shared}


def _stored_responses(request: Request) -> dict:
    """The stored responses section: every owner's (ids included) for the admin key or with
    no keys; for a user key only its own responses and the store's bounds."""
    record = record_of(request)
    return state_of(request).responses.snapshot(None if record.sees_all else record.owner)


@bp.get("/v1/memory/status")
@endpoint("Tiers, budgets, models, evictions and latency")
async def status(request: Request) -> HTTPResponse:
    app = request.app
    sched = state(app).scheduler
    booked1, booked2 = sched.tier1_booked(), sched.tier2_booked()
    gpu = nvml_sample() if sched.hardware.accelerator == "NvidiaCuda" and \
        not sched.hardware.simulated else None
    if gpu is not None:
        real_total, real_free = gpu.total, gpu.free
    else:   # tier 1 is process memory on a CPU-only or simulated host
        real_total, real_free = physical_memory(), available_memory()
    memory = sched.process_memory()
    rss, unbooked = memory.footprint_bytes, memory.unbooked_bytes
    # What the planner takes off tier 1 beyond its bookings: VRAM in use that it did not book
    # beside a GPU; where tier 1 is host memory, the process memory no booking covers.
    unaccounted = max(0, (real_total - real_free) - booked1) if gpu is not None else \
        sched.tier1_unbooked(memory)
    free1 = sched.budgets.tier1_bytes - booked1
    body = {
        "capabilities": _capabilities(sched),
        "tier1_vram_used_bytes": booked1, "tier1_vram_free_bytes": free1,
        "tier1_vram_real_free_bytes": real_free, "tier1_vram_real_total_bytes": real_total,
        "tier1_vram_unaccounted_bytes": unaccounted,
        "tier1_vram_effective_free_bytes": max(0, min(free1 - (0 if gpu else unaccounted),
                                                       real_free)),
        "tier2_pinned_ram_used_bytes": booked2,
        "tier2_pinned_ram_free_bytes": sched.budgets.tier2_bytes - booked2,
        "physical_pool_free_bytes": available_memory() if sched.hardware.unified else None,
        "process_footprint_bytes": rss, "process_memory_bytes": rss,
        "process_booked_bytes": memory.booked_bytes, "process_unaccounted_bytes": unbooked,
        "process_memory_cap_bytes": state(app).config.hardware.max_process_memory_bytes,
        "models": [_model(sched, st) for st in sched.models.values()],
        "recent_evictions": list(sched.recent_evictions)[::-1],
        "latency": {"routes": state(app).latency.snapshot(),
                    "workflows": state(app).workflows.snapshot()},
        "kv_park": sched.kv_park.snapshot(),
        "prompt_cache": prompt_cache.snapshot(sched.prompt_cache,
                                              record_of(request).sees_all),
        "stored_responses": _stored_responses(request),
        "realtime": state(app).realtime.status(),
    }
    if gpu is not None:
        body["gpu"] = gpu.stats
    workers = sched.rpc_workers
    if workers:     # probed (at most 5 s ago), except the ones a resident model holds
        await workers.refresh(sched.models.values(), STATUS_PROBE_AGE_S)
        body["rpc_workers"] = workers.status(sched.models.values())
        body["rpc_backend"] = llama_has_rpc()     # llama.cpp built with GGML_RPC=ON
    profile = state(app).config.server.profile
    if profile is not None:
        metric, target = PROFILES[profile]
        objective = {"metric": metric} if target is None else {"metric": metric,
                                                               "target_ms": target}
        body["profile"] = {"name": profile, "objective": objective}
    return json_response(body)


class TierBody(Wire):
    model: Annotated[str, Field(min_length=1)]
    target_tier: Annotated[Literal["tier1_gpu_vram", "tier2_pinned_ram", "tier3_nvme_ssd"],
                           Says("'target_tier' must be tier1_gpu_vram, tier2_pinned_ram or "
                                "tier3_nvme_ssd")]
    context_len: Annotated[int, Field(ge=1),
                           Says("'context_len' must be a positive integer")] | None = None


@bp.post("/v1/memory/tier")
@needs_ready
@admin_only     # a demotion evicts a model every key may be using; a promotion evicts others
@endpoint("Move a model to a tier", body=TierBody, errors=(404, 429, 500, 503, 507))
async def move_tier(request: Request) -> HTTPResponse:
    body = read_body(request, TierBody)
    model_id, target, ctx = body.model, Tier(body.target_tier), body.context_len
    sched = state_of(request).scheduler
    st = sched.get(model_id)
    if st.problem:
        raise errors.ModelNotAvailable(st.problem)
    per_slot = ctx // st.cfg.slots if ctx else None
    st = await sched.move(model_id, target, per_slot)
    return json_response({"model": st.id, "current_tier": str(st.tier),
                          "placement": sched.placement_of(st).to_wire()})


@bp.get("/v1/memory/kv-park")
@endpoint("KV parking: state and parked conversations (with the prompt cache, a view of "
          "its entries per model)")
async def kv_park_status(request: Request) -> HTTPResponse:
    return json_response(state_of(request).scheduler.kv_park.snapshot())


class KvParkBody(Wire):
    """Send ``enabled``, ``max_bytes`` or both."""
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["enabled"], "properties": {"enabled": {"type": "boolean"}}},
        {"required": ["max_bytes"], "properties": {"max_bytes": {"type": "integer"}}}]})
    enabled: Annotated[bool, Says("'enabled' must be a boolean")] | None = None
    max_bytes: Annotated[int, Field(ge=0),
                         Says("'max_bytes' must be a non-negative integer")] | None = None

    @model_validator(mode="after")
    def _something(self) -> KvParkBody:
        if self.enabled is None and self.max_bytes is None:
            raise refuse("Send 'enabled' and/or 'max_bytes'")
        return self


@bp.post("/v1/memory/kv-park")
@admin_only     # the cache's RAM cap is every key's: a user key does not shrink another's
@endpoint("Turn KV parking on or off, or change its cap (with the prompt cache, max_bytes is "
          "the cache's RAM tier)", body=KvParkBody)
async def kv_park_configure(request: Request) -> HTTPResponse:
    body = read_body(request, KvParkBody)
    enabled, max_bytes = body.enabled, body.max_bytes
    store = state_of(request).scheduler.kv_park
    store.configure(enabled, max_bytes)
    return json_response(store.snapshot())
