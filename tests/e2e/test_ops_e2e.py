"""Operations against `hypnos serve` as a real process on the real SmolLM2-135M model: a
stream holding its key's concurrency permit until its last byte and charged when it ends, a
restart keeping the day's tokens and the pool changes, a PUT that drains, a deadline refused
while a long request runs."""
import json
import sys
import threading
import time

import httpx
import pytest

from conftest import MODELS_DIR, ROOT, require_smollm2

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
LONG = [{"role": "user", "content": "Write a very long story about a dragon and a knight."}]
KEYS = """
[server]
api_keys = ["root-key"]
[[server.keys]]
key = "carol-key"
label = "carol"
max_concurrent = 1
[[server.keys]]
key = "dave-key"
label = "dave"
tokens_per_day = 30
"""
SMOL = f"""
[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "{GGUF}"
slots = 1
context_len = 2048
initial_tier = "tier1_gpu_vram"
"""


def write_config(tmp_path, text: str):
    require_smollm2()
    path = tmp_path / "hypnos.toml"
    path.write_text(f'models_dir = "{MODELS_DIR}"\n' + text)
    return path


def auth(key: str) -> dict:
    return {"authorization": f"Bearer {key}"}


def metric(srv, name: str, key: str) -> float | None:
    for line in httpx.get(srv.base + "/metrics").text.splitlines():
        if line.startswith(f'{name}{{key="{key}"}} '):
            return float(line.split()[-1])
    return None


class Stream:
    """A streaming chat read line by line, so a test can act between its first and last
    byte."""

    def __init__(self, srv, key: str | None = None, max_tokens: int = 80, **extra):
        body = {"model": "smol", "stream": True, "max_tokens": max_tokens, "temperature": 0.9,
                "seed": 7, "messages": LONG, **extra}
        self.cm = httpx.stream("POST", srv.base + "/v1/chat/completions", json=body,
                               headers=auth(key) if key else {}, timeout=120)
        self.resp = self.cm.__enter__()
        assert self.resp.status_code == 200, self.resp.read()
        self.lines = self.resp.iter_lines()

    def first_event(self) -> dict:
        for line in self.lines:
            if line.startswith("data: "):
                return json.loads(line[6:])
        raise AssertionError("no event")

    def finish(self) -> dict:
        """Read to [DONE]; the last JSON event (usage, telemetry)."""
        last = None
        for line in self.lines:
            if line == "data: [DONE]":
                break
            if line.startswith("data: "):
                last = json.loads(line[6:])
        self.cm.__exit__(None, None, None)
        return last


def chat(srv, key=None, timeout=120, headers=None, **extra) -> httpx.Response:
    body = {"model": "smol", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hi"}], **extra}
    return httpx.post(srv.base + "/v1/chat/completions", json=body,
                      headers={**(auth(key) if key else {}), **(headers or {})},
                      timeout=timeout)


def until(check, secs: float = 5.0):
    """The server frees a permit just after the last byte: allow it a moment."""
    deadline = time.monotonic() + secs
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


def test_stream_holds_the_permit_to_its_last_byte_and_is_charged_at_its_end(tmp_path):
    path = write_config(tmp_path, KEYS + SMOL)
    srv = ServerProcess(path, tmp_path / "server.log", ready_timeout=120)
    try:
        stream = Stream(srv, "carol-key")
        assert stream.first_event()["choices"][0]["delta"]["role"] == "assistant"
        refused = chat(srv, "carol-key")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "max_concurrent"
        assert refused.headers["retry-after"] == "1"
        stream.finish()
        assert until(lambda: chat(srv, "carol-key").status_code == 200)

        stream = Stream(srv, "dave-key")
        stream.first_event()
        assert not metric(srv, "hypnos_api_key_tokens_today", "dave")    # not charged yet
        usage = stream.finish()["usage"]
        assert usage["total_tokens"] > 30
        assert until(lambda: metric(srv, "hypnos_api_key_tokens_today", "dave")
                     == usage["total_tokens"])
        refused = chat(srv, "dave-key")
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "tokens_per_day"
    finally:
        srv.stop()
    srv = ServerProcess(path, tmp_path / "server2.log", ready_timeout=120)
    try:
        assert metric(srv, "hypnos_api_key_tokens_today", "dave") == usage["total_tokens"]
        refused = chat(srv, "dave-key")
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "tokens_per_day"
        assert chat(srv, "root-key").status_code == 200
    finally:
        srv.stop()
    log = (tmp_path / "server.log").read_text() + (tmp_path / "server2.log").read_text()
    assert "dave-key" not in log and "carol-key" not in log


def put_block(context_len: int) -> str:
    return (f'[[models]]\nid = "ignored"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
            f'weights_path = "{GGUF}"\ncontext_len = {context_len}\n')


class InThread(threading.Thread):
    """An HTTP call running meanwhile; ``result`` once joined."""

    def __init__(self, fn, *args, **kw):
        super().__init__(daemon=True)
        self.fn, self.args, self.kw, self.result = fn, args, kw, None
        self.start()

    def run(self):
        self.result = self.fn(*self.args, **self.kw)


def test_put_drains_a_running_stream_and_a_restart_keeps_the_change(tmp_path):
    path = write_config(tmp_path, SMOL)
    srv = ServerProcess(path, tmp_path / "server.log", ready_timeout=120)
    try:
        stream = Stream(srv, max_tokens=150)
        stream.first_event()
        put = InThread(httpx.put, srv.base + "/v1/models/smol",
                       json={"config": put_block(3072), "drain_secs": 300}, timeout=120)
        assert until(lambda: srv.status()["models"][0].get("changing"), 30)
        waiting = InThread(chat, srv)
        time.sleep(0.5)
        assert put.is_alive() and waiting.is_alive()      # both wait for the stream
        last = stream.finish()
        assert last["hypnos_telemetry"]["placement"]["allocated_context_len"] == 2048
        put.join(60)
        waiting.join(60)
        assert put.result.status_code == 200, put.result.text
        assert put.result.json()["action"] == "replaced"
        assert put.result.json()["persisted"] is True
        # The request that waited was served by the replacement.
        assert waiting.result.status_code == 200, waiting.result.text
        tele = waiting.result.json()["hypnos_telemetry"]
        assert tele["placement"]["allocated_context_len"] == 3072

        stream = Stream(srv, max_tokens=150)
        stream.first_event()
        refused = httpx.put(srv.base + "/v1/models/smol",
                            json={"config": put_block(4096), "drain_secs": 0.5}, timeout=60)
        assert refused.status_code == 429 and refused.json()["error"]["type"] == "model_busy"
        assert stream.finish()["hypnos_telemetry"]["placement"]["allocated_context_len"] == 3072
    finally:
        srv.stop()
    srv = ServerProcess(path, tmp_path / "server2.log", ready_timeout=120)
    try:
        resp = chat(srv)
        assert resp.status_code == 200
        assert resp.json()["hypnos_telemetry"]["placement"]["allocated_context_len"] == 3072
    finally:
        srv.stop()


def test_a_deadline_is_refused_while_a_long_request_runs(tmp_path):
    srv = ServerProcess(write_config(tmp_path, SMOL), tmp_path / "server.log",
                        ready_timeout=120)
    try:
        warm = chat(srv)                 # measures the model's service time
        assert warm.status_code == 200
        stream = Stream(srv, max_tokens=150)
        stream.first_event()
        refused = chat(srv, headers={"x-hypnos-deadline-ms": "1"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["type"] == "deadline_unmeetable"
        assert int(refused.headers["retry-after"]) >= 1
        admitted = InThread(chat, srv, headers={"x-hypnos-deadline-ms": "600000"})
        stream.finish()
        admitted.join(60)
        assert admitted.result.status_code == 200
        assert float(admitted.result.headers["x-hypnos-estimated-wait-ms"]) > 0
    finally:
        srv.stop()
