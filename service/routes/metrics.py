"""GET /metrics: Prometheus text (spec section 16), rendered by `observe.metrics.Metrics`."""
from __future__ import annotations

import asyncio

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import raw

from hypnos.service.scheduling.hardware import nvml_sample
from hypnos.service.http.openapi import endpoint
from hypnos.service.state import state_of

bp = Blueprint("metrics")


@bp.get("/metrics")
@endpoint("Prometheus metrics", ok={"text/plain": {"type": "string"}})
async def metrics(request: Request) -> HTTPResponse:
    ctx = state_of(request)
    hw = ctx.scheduler.hardware
    sample = (await asyncio.to_thread(nvml_sample)
              if hw.accelerator == "NvidiaCuda" and not hw.simulated else None)
    body = ctx.metrics.render(ctx.scheduler, ctx.limiter, ctx.keys.keys, sample)
    return raw(body, content_type="text/plain; version=0.0.4; charset=utf-8")
