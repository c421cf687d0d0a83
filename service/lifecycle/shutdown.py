"""Graceful shutdown on SIGTERM: drain, then stop.

On SIGTERM the server stops admitting work (every inference and placement route answers 503
``model_not_available`` with Retry-After, ``/ready`` answers 503 "shutting down") but keeps the
port open, so a client gets a clear answer instead of a refused connection. It waits until no
request holds a lease (streams included) or ``server.shutdown_grace_secs`` has passed, then
stops Sanic, which closes the idle connections, gives the busy ones (a stream past the grace)
``PAST_GRACE_SECS`` (its GRACEFUL_SHUTDOWN_TIMEOUT, 15 s by Sanic's default: the grace
was already given, and a supervisor's own timeout counts from the same signal) before
aborting them, waits (at most ENGINE_STOP_SECS)
for the aborted requests' engine threads to stop at their next token, unloads the engines
and exits 0. A second
SIGTERM (or SIGINT) stops at once.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import time

from sanic import Sanic

from hypnos.service.state import state

log = logging.getLogger("hypnos.shutdown")
POLL_SECS = 0.05
ENGINE_STOP_SECS = 10.0
#: What Sanic gives a connection still busy once the grace has passed, before aborting it.
PAST_GRACE_SECS = 1.0


def in_flight(app: Sanic) -> int:
    """Requests holding a lease or a hold on any model."""
    return sum(st.leases + st.holds for st in state(app).scheduler.models.values())


async def drain_and_stop(app: Sanic) -> None:
    """Refuse new work, wait for the running requests (bounded), then stop the server."""
    if not state(app).lifecycle.drain():       # a second SIGTERM: stop at once
        app.stop(terminate=False)
        return
    grace = state(app).config.server.shutdown_grace_secs
    log.info("SIGTERM: draining %d running requests (at most %s s)", in_flight(app), grace)
    deadline = time.monotonic() + grace
    while in_flight(app) and time.monotonic() < deadline:
        await asyncio.sleep(POLL_SECS)
    if in_flight(app):
        log.warning("stopping with %d requests still running after %s s", in_flight(app), grace)
    app.stop(terminate=False)


def install_drain(app: Sanic) -> None:
    """Replace Sanic's stop-at-once SIGTERM handler (a real server process only: the handler
    belongs to the main thread's loop, which a test client must not touch)."""
    @app.after_server_stop
    async def _engines_stopped(app):
        # Regression: a stream aborted past the grace left its llama.cpp thread decoding while
        # the interpreter shut down, and the process died of SIGSEGV instead of exiting 0. The
        # loop still runs here, so the cancelled handlers stop their engines and let go.
        state(app).keep_alive.close()         # no keep_alive timer moves a model from here
        deadline = time.monotonic() + ENGINE_STOP_SECS
        while in_flight(app) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECS)
        if not in_flight(app):      # engines with their own threads stop them when unloaded
            await state(app).scheduler.shutdown()

    @app.after_server_start
    async def _idle_sweep(app):
        state(app).keep_alive.start()

    @app.after_server_start
    async def _on_sigterm(app):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM,
                                lambda: asyncio.ensure_future(drain_and_stop(app)))
