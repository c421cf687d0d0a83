"""/v1/memory/status's process figures (issue 21): the footprint, the bookings that live in
it and the unbooked rest, and tier 1's unaccounted bytes where tier 1 is host memory. The
footprint is set by the test, never this process's."""
import pytest
from sanic import Sanic

from hypnos.catalog.catalog import load_catalog
from hypnos.planner.types import MIB, Accelerator, Hardware, Topology
from hypnos.service.app import create_app
from hypnos.service.config.schema import Config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio


async def status(hw: Hardware, rss: int) -> dict:
    app = create_app(Config(), catalog=load_catalog(), stage=False, hardware=hw, builds={})
    app.ctx.scheduler.residency.rss = lambda: rss
    _req, resp = await app.asgi_client.get("/v1/memory/status")
    assert resp.status == 200
    return resp.json


async def test_a_cpu_only_host_reports_and_subtracts_the_unbooked_process_memory():
    body = await status(Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 2000 * MIB), 300 * MIB)
    assert body["process_footprint_bytes"] == body["process_memory_bytes"] == 300 * MIB
    assert body["process_booked_bytes"] == 0
    assert body["process_unaccounted_bytes"] == 300 * MIB
    assert body["tier1_vram_unaccounted_bytes"] == 300 * MIB      # what the planner subtracts
    assert body["tier1_vram_free_bytes"] == 1000 * MIB            # by the bookings
    assert body["tier1_vram_effective_free_bytes"] <= 700 * MIB


async def test_a_simulated_host_reports_it_without_subtracting_it():
    hw = Hardware(Accelerator.CPU, Topology.CPU_ONLY, 0, 2000 * MIB, simulated=True)
    body = await status(hw, 300 * MIB)
    assert body["process_unaccounted_bytes"] == 300 * MIB
    assert body["tier1_vram_unaccounted_bytes"] == 0
