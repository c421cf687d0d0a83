"""A model larger than this machine's (simulated) tier 1, split across two real llama.cpp
``rpc-server`` workers on loopback, through a real ``hypnos serve`` (the faults are in
test_rpc_faults.py).

The budget is sized from the GGUF itself so that 10 of SmolLM2's 30 layers stay local and
each worker takes 10 (the second also the output head). The workers are started with
``hypnos rpc-worker`` (llama.cpp's rpc-server, built once per machine and cached). Greedy
answers of the split model are compared with the same model run locally: the test asserts
what holds on any machine (both answer, the same prompt tokens) and prints whether the texts
are equal; the CPU backend computes the same kernels in both, but the thread counts differ.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from conftest import require_smollm2
from rpc_fixtures import (ASK, BOUND_S, CONTEXT, LOCAL_LAYERS, NO_EOS, Worker,
                          built, chat, serve_split, workers_by_endpoint)

from hypnos.bench.harness import free_port
from hypnos.engines.llama.rpc_probe import probe

pytestmark = [pytest.mark.real, pytest.mark.slow]

__all__ = ["built"]     # the module's fixture, from rpc_fixtures


def test_split_across_two_workers_answers_like_the_local_model(built, tmp_path):
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = serve_split(tmp_path, ports)
    try:
        resp = chat(srv)
        assert resp.status_code == 200, resp.text
        split = resp.json()
        model = next(m for m in srv.status()["models"] if m["id"] == "chat")
        placement = model["placement"]
        shares = placement["rpc_workers"]
        assert placement["gpu_layers"] == LOCAL_LAYERS          # local tier-1 layers
        assert [(s["endpoint"], s["first_layer"], s["layers"], s["output_head"])
                for s in shares] == [(workers[0].endpoint, 10, 10, False),
                                     (workers[1].endpoint, 20, 10, True)]
        # What llama.cpp logged it put where: the plan (the head counted on the last worker).
        assert model["split_layers"] == {"local": 10, workers[0].endpoint: 10,
                                         workers[1].endpoint: 11}
        assert srv.status()["rpc_backend"] is True
        # The local part lives in the split model's child process: its memory is reported.
        assert model["memory_truth"]["child_rss_bytes"] > placement["vram_weight_bytes"] // 2
        status = workers_by_endpoint(srv)
        for share in shares:
            w = status[share["endpoint"]]
            assert w["answers"] is True and w["model"] == "chat"
            assert w["booked_bytes"] == share["booked_bytes"] > 0
            assert w["free_bytes"] == w["budget_bytes"] - w["booked_bytes"]
        print("\nsplit placement:", json.dumps(placement, indent=1))
        print("split decode tokens/s:",
              split["hypnos_telemetry"]["engine"]["decode_tokens_per_s"])
        local = _local_answer()
        assert split["usage"]["prompt_tokens"] == local.prompt_tokens
        text = split["choices"][0]["message"]["content"]
        assert text and local.text
        print(f"local decode tokens/s: {local.timings.decode_tokens_per_s:.1f}")
        print(f"greedy split == local: {text == local.text}\n split: {text!r}\n "
              f"local: {local.text!r}")
        # Sessions reach the split model's own engine (in its child process).
        assert chat(srv, session_id="s1").status_code == 200
        exported = srv.post("/v1/sessions/export", {"model": "chat", "session_id": "s1"})
        assert exported.status_code == 200, exported.text
        assert exported.json()["n_tok"] > split["usage"]["prompt_tokens"]
        released = srv.post("/v1/sessions/release", {"model": "chat", "session_id": "s1"})
        assert released.json()["released"] is True
        # A client gone mid-stream: the cancel reaches the child, the lease ends.
        with httpx.stream("POST", srv.base + "/v1/chat/completions", timeout=BOUND_S, json={
                "model": "chat", "messages": ASK, "max_tokens": 1500, "stream": True,
                "logit_bias": NO_EOS}) as resp:
            assert any(line.startswith("data: ") for line in resp.iter_lines())
        deadline = time.monotonic() + BOUND_S
        while next(m for m in srv.status()["models"] if m["id"] == "chat")["active_leases"]:
            assert time.monotonic() < deadline, "the lease outlived its client"
            time.sleep(0.05)
        assert chat(srv).status_code == 200
    finally:
        srv.stop()
        for w in workers:
            w.kill()


def _local_answer():
    """The same request on the same model loaded whole in this process."""
    from hypnos.engines.llama.engine import LlamaChatEngine
    from hypnos.engines.records import ChatRequest, LoadSpec
    engine = LlamaChatEngine()
    engine.load(LoadSpec("local", require_smollm2(), context_len=CONTEXT, gpu_layers=0))
    try:
        return engine.chat(ChatRequest(messages=ASK, max_tokens=24, temperature=0), None,
                           threading.Event())
    finally:
        engine.unload()


def test_two_split_models_take_turns_on_the_workers(built, tmp_path):
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = serve_split(tmp_path, ports, chats=("chat", "chat2"))
    try:
        for model in ("chat", "chat2", "chat"):
            resp = chat(srv, model=model)
            assert resp.status_code == 200, resp.text
            tiers = {m["id"]: m["current_tier"] for m in srv.status()["models"]}
            other = "chat2" if model == "chat" else "chat"
            assert tiers[model] == "tier1_gpu_vram" and tiers[other] != "tier1_gpu_vram"
            held = {w["model"] for w in srv.status()["rpc_workers"]}
            assert held == {model}          # a worker serves one model at a time
        evictions = srv.status()["recent_evictions"]
        assert {(e["model"], e["for_model"]) for e in evictions} >= {("chat", "chat2"),
                                                                      ("chat2", "chat")}
        # While chat streams, chat2 cannot take its workers: it waits limits.swap_wait_ms
        # (2 s) for the stream, then 507 naming the model in the way; chat's stream goes on.
        with httpx.stream("POST", srv.base + "/v1/chat/completions", timeout=BOUND_S, json={
                "model": "chat", "messages": ASK, "max_tokens": 1500, "stream": True,
                "logit_bias": NO_EOS}) as resp:
            lines = resp.iter_lines()
            assert any(line.startswith("data: ") for line in lines)
            refused = chat(srv, model="chat2")
            assert refused.status_code == 507, refused.text
            assert "'chat'" in refused.json()["error"]["message"]
            assert next(line for line in lines if line.startswith("data: "))
    finally:
        srv.stop()
        for w in workers:
            w.kill()


def test_probe_reads_a_worker_and_names_what_is_not_one(built, tmp_path):
    worker = Worker(free_port(), tmp_path / "worker.log")
    try:
        report = probe(worker.endpoint)
        assert report.answers and report.version.startswith("7.") and report.devices >= 1
        assert 0 < report.free_bytes <= report.total_bytes
    finally:
        worker.kill()
    gone = probe(worker.endpoint, 1.0)
    assert not gone.answers and "refused" in gone.error
    # An HTTP server is not a worker: no answer to HELLO in its format.
    with subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                           str(port := free_port())], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, env={**os.environ}) as http:
        try:
            deadline = time.monotonic() + 10
            while (r := probe(f"127.0.0.1:{port}", 1.0)).error.endswith("refused"):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert not r.answers and r.error
        finally:
            http.kill()
