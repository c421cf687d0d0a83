"""What the RPC split tests share: llama.cpp rpc-server workers started with
``hypnos rpc-worker``, a relay that goes silent, and a ``hypnos serve`` whose simulated tier 1
holds 10 of SmolLM2's 30 layers, each worker 10 (the second also the output head), the sizes
read from the GGUF itself."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from conftest import MODELS_DIR, require_smollm2

from hypnos.bench.harness import ServerProcess
from hypnos.cli.llama_build import rpc_server_binary
from hypnos.engines.devices import llama_has_rpc
from hypnos.engines.gguf_meta import read_gguf_meta
from hypnos.engines.llama.rpc_probe import probe

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


def serve_split(tmp, ports, chats: tuple[str, ...] = ("chat",), stall_secs: int = 120
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


def stream_until(srv, worker: Worker, how=signal.SIGKILL) -> list[dict]:
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
