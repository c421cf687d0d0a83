"""A model larger than this machine's (simulated) tier 1, split across two real llama.cpp
``rpc-server`` workers on loopback, through a real ``hypnos serve``; and the faults.

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
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from conftest import MODELS_DIR, require_smollm2

from hypnos.bench.harness import ServerProcess, free_port
from hypnos.cli.llama_build import rpc_server_binary
from hypnos.engines.devices import llama_has_rpc
from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.engines.llama.rpc_probe import probe

pytestmark = [pytest.mark.real, pytest.mark.slow]

CONTEXT = 2048          # the least per-slot context a request is sized for
LOCAL_LAYERS = WORKER_LAYERS = 10
ASK = [{"role": "user", "content": "Name three colours and say why you like them."}]
NO_EOS = {"0": -100, "2": -100}
BOUND_S = 60          # no request may take longer than this to end once a worker is gone


class Worker:
    """``hypnos rpc-worker`` on a port of 127.0.0.1, answering once started."""

    def __init__(self, port: int, log_path):
        self.port, self.endpoint = port, f"127.0.0.1:{port}"
        self.log = open(log_path, "a")  # noqa: SIM115 (the worker writes it until stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hypnos.cli", "rpc-worker", "--port", str(port),
             "--threads", "1"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not probe(self.endpoint, 1.0).answers:
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                f"rpc-worker on {port} did not start (see {log_path})"
            time.sleep(0.1)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


class HangingRelay:
    """127.0.0.1:port -> a worker, forwarding until ``hang_after`` bytes went to the worker,
    then neither forwarding nor closing anything (a peer gone silent: TCP still open)."""

    def __init__(self, target: int, hang_after: int):
        self.target, self.hang_after, self.sent = target, hang_after, 0
        self.hung = threading.Event()
        self.closed = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            for src, dst, count in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, count), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while not self.hung.is_set():
                data = src.recv(1 << 16)
                if not data:                # one side closed: so does the other
                    dst.shutdown(socket.SHUT_RDWR)
                    return
                if self.hung.is_set():
                    break
                dst.sendall(data)
                if count:
                    self.sent += len(data)
                    if self.sent > self.hang_after:
                        self.hung.set()
        except OSError:
            return
        self.closed.wait()              # silent from now on, every connection left open

    def close(self) -> None:
        self.closed.set()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def _sizes():
    """tier-1 budget and worker memory for LOCAL_LAYERS local, WORKER_LAYERS per worker."""
    shape = read_gguf_meta(require_smollm2()).to_shape()
    unit = shape.layer_bytes + -(-shape.kv_bytes_per_token * CONTEXT // shape.num_layers)
    local = shape.non_layer_bytes + shape.workspace_bytes + LOCAL_LAYERS * unit + unit // 2
    first = shape.workspace_bytes + WORKER_LAYERS * unit + unit // 2
    last = shape.workspace_bytes + shape.non_layer_bytes + (30 - 2 * WORKER_LAYERS) * unit \
        + unit // 2
    return 2 * local, first, last


def _chat_block(model_id: str) -> str:
    return (f'[[models]]\nid = "{model_id}"\nmodality = "text_generation"\n'
            'engine = "ggml_llama"\nweights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"\n'
            f"context_len = {CONTEXT}\nkeep_warm_in_ram = false\n")


def _config(ports: list[int], chats: tuple[str, ...] = ("chat",), stall_secs: int = 120) -> str:
    ram, first, last = _sizes()
    workers = "".join(f'[[hardware.rpc_workers]]\nendpoint = "127.0.0.1:{p}"\n'
                      f"memory_bytes = {m}\n" for p, m in zip(ports, (first, last),
                                                               strict=True))
    return f"""models_dir = "{MODELS_DIR}"
[limits]
repetition_loop_tokens = 0
[hardware]
kv_park = false
rpc_stall_secs = {stall_secs}
[hardware.simulate]
ram_bytes = {ram}
{workers}
{"".join(_chat_block(c) for c in chats)}
[[models]]
id = "minilm"
modality = "embeddings"
engine = "onnx_runtime"
weights_path = "minilm-l6-v2/model.int8.onnx"
tokenizer_path = "minilm-l6-v2/tokenizer.json"
"""


@pytest.fixture(scope="module")
def built():
    assert llama_has_rpc(), ("this venv's llama-cpp-python has no RPC backend; ./run.sh "
                             "installs the GGML_RPC=ON build (cli/llama_build.py)")
    return rpc_server_binary()       # once per machine (minutes the first time)


def _serve(tmp, ports, chats: tuple[str, ...] = ("chat",), stall_secs: int = 120
           ) -> ServerProcess:
    path = tmp / "hypnos.toml"
    path.write_text(_config(ports, chats, stall_secs))
    return ServerProcess(path, tmp / "server.log", env={"HYPNOS_MODELS_DIR": str(MODELS_DIR)})


def chat(srv, model: str = "chat", **extra) -> httpx.Response:
    return httpx.post(srv.base + "/v1/chat/completions", timeout=BOUND_S, json={
        "model": model, "messages": ASK, "max_tokens": 24, "temperature": 0, **extra})


def embed(srv) -> httpx.Response:
    return httpx.post(srv.base + "/v1/embeddings", timeout=BOUND_S,
                      json={"model": "minilm", "input": "a lighthouse"})


def workers_by_endpoint(srv) -> dict[str, dict]:
    return {w["endpoint"]: w for w in srv.status()["rpc_workers"]}


def test_split_across_two_workers_answers_like_the_local_model(built, tmp_path):
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = _serve(tmp_path, ports)
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


def _stream_until_killed(srv, worker: Worker, how=signal.SIGKILL) -> list[dict]:
    """Stream a long answer, signal ``worker`` (kill it, or stop it) after the first tokens;
    the chunks received."""
    chunks: list[dict] = []
    with httpx.stream("POST", srv.base + "/v1/chat/completions", timeout=BOUND_S, json={
            "model": "chat", "messages": ASK, "max_tokens": 1500, "stream": True,
            "temperature": 0, "logit_bias": NO_EOS}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunks.append(json.loads(line[6:]))
            if len(chunks) == 3:
                worker.proc.send_signal(how)
    return chunks


def test_worker_lost_mid_stream_then_back(built, tmp_path):
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = _serve(tmp_path, ports)
    try:
        started = time.monotonic()
        chunks = _stream_until_killed(srv, workers[1])
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
    srv = _serve(tmp_path, ports, stall_secs=3)
    try:
        started = time.monotonic()
        chunks = _stream_until_killed(srv, workers[0], signal.SIGSTOP)
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
    srv = _serve(tmp_path, [ports[0], relay.port], stall_secs=3)
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
    srv = _serve(tmp_path, ports)
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
    srv = _serve(tmp_path, ports)
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


def test_two_split_models_take_turns_on_the_workers(built, tmp_path):
    ports = [free_port(), free_port()]
    workers = [Worker(p, tmp_path / f"worker{i}.log") for i, p in enumerate(ports)]
    srv = _serve(tmp_path, ports, chats=("chat", "chat2"))
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
