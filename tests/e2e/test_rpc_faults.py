"""Faults of a model split across two real llama.cpp rpc-server workers on loopback, through
a real ``hypnos serve`` (the setup of ``rpc_fixtures``): a worker killed mid-stream, stopped
mid-stream (its TCP connection open: only the stall bound ends the request), gone silent
mid-load (behind a relay that stops forwarding), lost between requests, down at start-up.
Each request ends within a bound with the spec's error naming the worker; the other models
keep serving; the model loads again once its workers answer.
"""
from __future__ import annotations

import signal
import time

import pytest

from rpc_fixtures import (BOUND_S, HangingRelay, Worker,
                          built, chat, embed, serve_split, stream_until, workers_by_endpoint)

from hypnos.bench.harness import free_port

pytestmark = [pytest.mark.real, pytest.mark.slow]

__all__ = ["built"]     # the module's fixture, from rpc_fixtures


def test_worker_lost_mid_stream_then_back(built, tmp_path):
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = serve_split(tmp_path, ports)
    try:
        started = time.monotonic()
        chunks = stream_until(srv, workers[1])
        assert time.monotonic() - started < BOUND_S
        last = chunks[-1]
        assert last["choices"][0]["finish_reason"] == "error", last
        assert last["error"]["type"] == "server_error"            # spec 7.4: in a stream
        assert workers[1].endpoint in last["error"]["message"]
        assert "stopped answering" in last["error"]["message"]
        print(f"\nmid-stream loss: {len(chunks)} chunks, then {last['error']}")
        # Demoted (in the background once the stream ended): out of tier 1, the eviction
        # recorded with its reason.
        deadline = time.monotonic() + BOUND_S
        while next(m for m in srv.status()["models"] if m["id"] == "chat")[
                "current_tier"] == "tier1_gpu_vram":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        status = srv.status()
        assert any(e["model"] == "chat" and e["reason"] == "rpc_worker_lost"
                   for e in status["recent_evictions"])
        lost = workers_by_endpoint(srv)[workers[1].endpoint]
        assert lost["answers"] is False and lost["model"] is None
        # The next request: 503 naming the worker; the other models serve.
        again = chat(srv)
        assert again.status_code == 503, again.text
        assert again.json()["error"]["type"] == "model_not_available"
        assert workers[1].endpoint in again.json()["error"]["message"]
        print(f"next request: {again.status_code} {again.json()['error']}")
        assert embed(srv).status_code == 200
        # The worker answers again: the next request loads the model again.
        workers[1] = Worker(ports[1], tmp_path / "worker1-again.log")
        back = chat(srv)
        assert back.status_code == 200, back.text
        assert back.json()["choices"][0]["message"]["content"]
    finally:
        srv.stop()
        for w in workers:
            if w.proc.poll() is None:
                w.kill()


def test_worker_hung_mid_stream_ends_the_request(built, tmp_path):
    """A stopped worker keeps its connection open (the kernel still answers TCP): only the
    stall bound (hardware.rpc_stall_secs, 3 s here) ends the request."""
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = serve_split(tmp_path, ports, stall_secs=3)
    try:
        started = time.monotonic()
        chunks = stream_until(srv, workers[0], signal.SIGSTOP)
        took = time.monotonic() - started
        assert took < BOUND_S
        last = chunks[-1]
        assert last["choices"][0]["finish_reason"] == "error", last
        assert workers[0].endpoint in last["error"]["message"]
        assert "no progress for 3 s" in last["error"]["message"]
        print(f"\nhung worker: the stream ended after {took:.1f} s with {last['error']}")
        workers[0].proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + BOUND_S
        while (resp := chat(srv)).status_code != 200:   # it answers again once resumed
            assert resp.status_code == 503 and time.monotonic() < deadline, resp.text
            time.sleep(0.5)
    finally:
        srv.stop()
        for w in workers:
            w.proc.send_signal(signal.SIGCONT)
            w.kill()


def test_worker_gone_silent_mid_load(built, tmp_path):
    """The second worker (behind a relay) goes silent after 4 MB of the weights: the load
    stops making progress and is ended at the stall bound; the request gets the 503 naming
    the worker, the server keeps serving the other models."""
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    relay = HangingRelay(ports[1], hang_after=4 << 20)
    srv = serve_split(tmp_path, [ports[0], relay.port], stall_secs=3)
    try:
        started = time.monotonic()
        resp = chat(srv)
        took = time.monotonic() - started
        assert relay.hung.is_set()
        assert resp.status_code == 503, resp.text
        err = resp.json()["error"]
        assert err["type"] == "model_not_available"
        assert f"127.0.0.1:{relay.port} stopped answering after no progress for 3 s" in \
            err["message"]
        print(f"\nworker silent mid-load: 503 after {took:.1f} s: {err['message']}")
        assert embed(srv).status_code == 200
        status = srv.status()
        assert next(m for m in status["models"] if m["id"] == "chat")["current_tier"] != \
            "tier1_gpu_vram"
    finally:
        srv.stop()
        relay.close()
        for w in workers:
            w.kill()


def test_worker_lost_between_requests(built, tmp_path):
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = serve_split(tmp_path, ports)
    try:
        assert chat(srv).status_code == 200
        workers[0].kill()                   # while the split model is loaded and idle
        lost = chat(srv)                    # not streamed: the 503, naming the worker
        assert lost.status_code == 503, lost.text
        err = lost.json()["error"]
        assert err["type"] == "model_not_available" and workers[0].endpoint in err["message"]
        assert lost.headers.get("retry-after") == "5"
        print(f"\nworker lost while idle, next request: 503 {err}")
        again = chat(srv)
        assert again.status_code == 503 and workers[0].endpoint in again.json()["error"][
            "message"]
        workers[0] = Worker(ports[0], tmp_path / "worker0-again.log")
        assert chat(srv).status_code == 200
    finally:
        srv.stop()
        for w in workers:
            if w.proc.poll() is None:
                w.kill()


def test_worker_down_at_startup(built, tmp_path):
    ports = [free_port(), free_port()]
    first = Worker(ports[0], tmp_path / "worker0.log")
    srv = serve_split(tmp_path, ports)
    second = None
    try:
        resp = chat(srv)
        assert resp.status_code == 503, resp.text
        err = resp.json()["error"]
        assert err["type"] == "model_not_available" and f"127.0.0.1:{ports[1]}" in \
            err["message"] and "'chat'" in err["message"]
        assert resp.headers.get("retry-after") == "5"
        print(f"\nworker down at start-up: {resp.status_code} {err}")
        assert embed(srv).status_code == 200
        status = workers_by_endpoint(srv)
        assert status[first.endpoint]["answers"] is True
        assert status[f"127.0.0.1:{ports[1]}"]["answers"] is False
        assert "refused" in status[f"127.0.0.1:{ports[1]}"]["error"]
        log = (tmp_path / "server.log").read_text()
        assert f"RPC worker 127.0.0.1:{ports[1]} does not answer" in log
        assert f"RPC worker {first.endpoint} answers: protocol 7." in log
        second = Worker(ports[1], tmp_path / "worker1.log")
        ok = chat(srv)
        assert ok.status_code == 200, ok.text
    finally:
        srv.stop()
        for w in (first, second):
            if w is not None:
                w.kill()


