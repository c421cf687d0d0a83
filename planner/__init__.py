"""Pure placement math: budgets, footprints, layer splits, KV sizing, MoE offload, eviction.

No I/O and no imports outside the standard library and this package.
"""
from hypnos.planner.admission import Admitted, DeadlineMiss, QueueFull, admit, implicit_deadline
from hypnos.planner.budgets import (KeptEngineBooking, derive_budgets, hardware_for,
                                    kept_engine_booking, kv_park_cap, metal_working_set,
                                    prompt_cache_caps,
                                    tier2_keeps_engine)
from hypnos.planner.devices import ACCELERATED_ENGINES, can_accelerate, placement_device
from hypnos.planner.eviction import eviction_order, plan_eviction
from hypnos.planner.context import (DEFAULT_CONTEXT_CAP, FALLBACK_CONTEXT, REQUEST_CONTEXT_FLOOR,
                                    context_window, funded_context, request_context)
from hypnos.planner.footprint import (estimate_workspace_bytes, kv_bytes_per_token,
                                      non_layer_fraction, shape_from_arch)
from hypnos.planner.loading import (LoadPlan, LoadRefusal, NoRoom, OverProcessCap, TooBig,
                                    plan_load)
from hypnos.planner.placement import allocated_context, effective_moe_offload, place
from hypnos.planner.sharing import (added_bytes, net_booked, plan_shared_eviction,
                                    shared_draft_bytes)
from hypnos.planner.types import (GIB, MIB, Accelerator, Budgets, DraftShape, EvictionPlan,
                                  Hardware, ModelShape, MoeOffload, NoFit, Placement,
                                  PlacementRequest, Priority, RemoteShare, ResidentModel, Tier,
                                  Topology)
from hypnos.planner.workers import WorkerBudget, place_split, worker_order

__all__ = [
    "Admitted", "DeadlineMiss", "QueueFull", "admit", "implicit_deadline",
    "DEFAULT_CONTEXT_CAP", "FALLBACK_CONTEXT", "REQUEST_CONTEXT_FLOOR", "context_window",
    "funded_context", "request_context",
    "LoadPlan", "LoadRefusal", "NoRoom", "OverProcessCap", "TooBig", "plan_load",
    "ACCELERATED_ENGINES", "can_accelerate", "placement_device",
    "GIB", "MIB", "Accelerator", "Budgets", "EvictionPlan", "Hardware", "ModelShape",
    "MoeOffload", "NoFit", "Placement", "PlacementRequest", "Priority", "ResidentModel", "Tier",
    "Topology", "allocated_context", "derive_budgets", "effective_moe_offload",
    "estimate_workspace_bytes", "eviction_order", "hardware_for", "kv_bytes_per_token",
    "metal_working_set", "non_layer_fraction", "place", "plan_eviction", "shape_from_arch",
    "KeptEngineBooking", "kept_engine_booking", "kv_park_cap", "tier2_keeps_engine",
    "prompt_cache_caps",
    "RemoteShare", "WorkerBudget", "place_split", "worker_order",
    "DraftShape", "added_bytes", "net_booked", "plan_shared_eviction", "shared_draft_bytes",
]
