"""Faults on a real `hypnos serve`: broken model files, clients that hang up, SIGTERM while
requests run, kill -9 and a restart.

The engine failing mid-stream (error chunk, then [DONE]) is covered through the ASGI client
in tests/http/test_http.py (test_engine_failure_mid_stream_is_an_error_chunk_then_done), since a
real model cannot be made to fail on demand; here it is checked that its lease is freed.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from conftest import require_smollm2
from test_http import _FailingEngine, app_for, call

from hypnos.bench.harness import ManagedProcess, ServerProcess
from hypnos.service.lifecycle.shutdown import ENGINE_STOP_SECS, PAST_GRACE_SECS

pytestmark = [pytest.mark.real, pytest.mark.slow]

NO_EOS = {"0": -100, "2": -100}
HI = [{"role": "user", "content": "Tell me a long story about a lighthouse."}]
FREED_WITHIN_S = 10


def _config(models_dir, extra: str = "") -> str:
    return f"""models_dir = "{models_dir}"
[limits]
repetition_loop_tokens = 0
{extra}
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
slots = 2
context_len = 4096
initial_tier = "tier1_gpu_vram"
[[models]]
id = "docling"
modality = "document_conversion"
engine = "docling"
[[models]]
id = "truncated"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "truncated.gguf"
[[models]]
id = "garbage"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "garbage.gguf"
[[models]]
id = "headless"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "headless.gguf"
"""


def _models(tmp):
    """SmolLM2, and three broken copies: cut in half (metadata readable, tensors short), cut
    inside its header, and random bytes after a GGUF magic."""
    smol = require_smollm2()
    models = tmp / "models"
    models.mkdir()
    os.link(smol, models / "smol.gguf")
    data = smol.read_bytes()
    (models / "truncated.gguf").write_bytes(data[:len(data) // 2])
    (models / "headless.gguf").write_bytes(data[:4096])
    (models / "garbage.gguf").write_bytes(b"GGUF" + os.urandom(1 << 20))
    return models


def _serve(tmp, extra: str = "") -> ServerProcess:
    models = tmp / "models" if (tmp / "models").exists() else _models(tmp)
    path = tmp / "hypnos.toml"
    path.write_text(_config(models, extra))
    return ServerProcess(path, tmp / "server.log", ready_timeout=180,
                         env={"HYPNOS_MODELS_DIR": str(models)})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = _serve(tmp_path_factory.mktemp("faults"))
    yield srv
    srv.stop()


def chat(base: str, headers: dict | None = None, **extra) -> httpx.Response:
    return httpx.post(base + "/v1/chat/completions", timeout=300, headers=headers, json={
        "model": extra.pop("model", "chat"), "messages": HI, "max_tokens": 8, **extra})


def wait_idle(srv: ServerProcess, bound: float = FREED_WITHIN_S) -> float:
    """Seconds until no model has a lease or a running request; fails past ``bound``."""
    started = time.monotonic()
    while time.monotonic() - started < bound:
        models = srv.status()["models"]
        if all(m["active_leases"] == 0 and m["queued"] == 0 for m in models):
            return time.monotonic() - started
        time.sleep(0.05)
    pytest.fail(f"leases still held after {bound} s: {srv.status()['models']}")


def test_broken_model_files_are_named_and_the_others_keep_serving(server):
    for model in ("truncated", "garbage", "headless"):
        resp = chat(server.base, model=model)
        assert resp.status_code in (500, 503), resp.text
        err = resp.json()["error"]
        assert err["type"] == {500: "server_error", 503: "model_not_available"}[
            resp.status_code]
        assert f"'{model}'" in err["message"], err
        # The same answer again: a broken file is not retried into a crash.
        assert chat(server.base, model=model).status_code == resp.status_code
        ok = chat(server.base)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"]
    listed = {m["id"]: m for m in server.status()["models"]}
    assert listed["chat"]["current_tier"] == "tier1_gpu_vram"
    wait_idle(server)


def test_client_gone_mid_stream_frees_the_slot(server):
    with (httpx.Client(base_url=server.base, timeout=60) as client,
          client.stream("POST", "/v1/chat/completions", json={
              "model": "chat", "messages": HI, "max_tokens": 2000, "stream": True,
              "logit_bias": NO_EOS}) as resp):
        assert resp.status_code == 200
        # Leaving iter_lines() closes the connection, so the check is made inside it.
        for line in resp.iter_lines():
            if line.startswith("data: ") and '"content": ""' not in line:
                chat_model = server.status()["models"][0]
                assert chat_model["active_leases"] == 1    # the stream is under way
                break
    # The client is gone with ~2000 tokens left to generate (minutes here): the lease goes
    # within a bound far below that.
    freed = wait_idle(server)
    print(f"\nlease freed {freed * 1000:.0f} ms after the client hung up mid-stream")
    assert chat(server.base).status_code == 200


def test_client_gone_before_a_non_streamed_answer_frees_the_lease(server):
    """A whole request is sent, its lease taken, and the client hangs up before the answer
    (a non-streamed chat, ~2000 tokens to go): the handler is cancelled, the engine stops at
    its next token and the lease goes. (No route reads its body as a stream: a client gone
    mid-upload never reaches a handler, so it could hold nothing.)"""
    body = json.dumps({"model": "chat", "messages": HI, "max_tokens": 2000,
                       "logit_bias": NO_EOS}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head.encode() + body)
        started = time.monotonic()
        while not any(m["id"] == "chat" and m["active_leases"] == 1
                      for m in server.status()["models"]):
            assert time.monotonic() - started < 60, "the request never took its lease"
            time.sleep(0.02)
    freed = wait_idle(server)
    print(f"\nlease freed {freed * 1000:.0f} ms after the client hung up before the answer")
    assert chat(server.base).status_code == 200


def _long_pdf(pages: int) -> bytes:
    import io
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=letter)
    for page in range(pages):
        for line in range(40):
            c.drawString(72, 740 - line * 16, f"Page {page + 1}, line {line + 1}: lighthouses.")
        c.showPage()
    c.save()
    return buf.getvalue()


def test_client_gone_mid_document_frees_the_lease(server):
    pdf = _long_pdf(60)
    with (httpx.Client(base_url=server.base, timeout=120) as client,
          client.stream("POST", "/v1/documents/convert",
                        data={"model": "docling", "stream": "true"},
                        files={"file": ("long.pdf", pdf, "application/pdf")}) as resp):
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():      # leaving it closes the connection
            if line.startswith("data: ") and '"page"' in line:
                docs = [m for m in server.status()["models"] if m["id"] == "docling"][0]
                assert docs["active_leases"] == 1
                break
    freed = wait_idle(server)
    print(f"\nlease freed {freed * 1000:.0f} ms after the client hung up mid-document")


def test_engine_failure_mid_stream_frees_the_lease():
    import anyio

    async def run():
        app = app_for(effects=__import__("conftest").EngineEffects(_FailingEngine()))
        body = {"model": "chat", "stream": True, "messages": HI}
        resp = await call(app, "post", "/v1/chat/completions", json=body)
        assert resp.text.rstrip().endswith("data: [DONE]")
        st = app.ctx.scheduler.models["chat"]
        assert st.leases == 0 and st.running == 0 and st.holds == 0
    anyio.run(run)


# ------------------------------------------------------------------ SIGTERM, kill -9

def _stream_in_background(base: str, max_tokens: int, headers: dict | None = None):
    """A streaming chat in a child process (so the test can signal the server meanwhile);
    it prints each event and exits 0 once [DONE] came."""
    code = f"""
import httpx, sys
with httpx.stream("POST", {base + "/v1/chat/completions"!r}, timeout=120,
                  headers={headers or {}!r}, json={{
        "model": "chat", "stream": True, "max_tokens": {max_tokens},
        "logit_bias": {NO_EOS!r}, "messages": {HI!r}}}) as r:
    for line in r.iter_lines():
        if line.startswith("data: "):
            print(line, flush=True)
"""
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _first_event(proc) -> str:
    line = proc.stdout.readline()
    assert line.startswith("data: "), line
    return line


SIGTERM_BOUND_S = 60


def test_sigterm_refuses_new_work_finishes_running_and_exits_0(tmp_path):
    srv = _serve(tmp_path, "")
    streams = [_stream_in_background(srv.base, 24) for _ in range(2)]
    for proc in streams:
        _first_event(proc)
    signalled = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    refused = chat(srv.base)
    assert refused.status_code == 503, refused.text
    err = refused.json()["error"]
    assert err["type"] == "model_not_available" and "shutting down" in err["message"]
    assert refused.headers["retry-after"] == "5"
    ready = httpx.get(srv.base + "/ready", timeout=10)
    assert ready.status_code == 503 and ready.json()["reason"] == "shutting down"
    for proc in streams:
        rest = proc.communicate(timeout=SIGTERM_BOUND_S)[0].splitlines()
        assert proc.returncode == 0 and rest[-1] == "data: [DONE]", rest[-3:]
        final = json.loads(rest[-2][len("data: "):])
        assert final["choices"][0]["finish_reason"] == "length"
    assert srv.proc.wait(SIGTERM_BOUND_S) == 0
    print(f"\nSIGTERM to exit: {time.monotonic() - signalled:.1f} s with 2 streams running")
    srv.log.close()


def test_sigterm_stops_a_stream_past_the_grace_and_still_exits_0(tmp_path):
    srv = _serve(tmp_path, "[server]\nshutdown_grace_secs = 1\n")
    proc = _stream_in_background(srv.base, 2000)
    _first_event(proc)
    signalled = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(60) == 0
    took = time.monotonic() - signalled
    # The grace, then PAST_GRACE_SECS for busy connections (Sanic's default was 15 s: a
    # stream of 2,000 tokens could end within it on a fast machine), the engines' stop.
    assert took < 1 + PAST_GRACE_SECS + ENGINE_STOP_SECS, took
    proc.communicate(timeout=30)
    assert proc.returncode != 0               # the client saw its stream cut, not a hang
    srv.log.close()


KEYS = """
[[server.keys]]
key = "sk-hostile"
label = "lab"
admin = true
tokens_per_day = 1000000
"""
AUTH = {"authorization": "Bearer sk-hostile"}
ADDED = ('[[models]]\nid = "smol2"\nmodality = "text_generation"\nengine = "ggml_llama"\n'
         'weights_path = "smol.gguf"\n')


def _tokens_today(base: str) -> float:
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        if line.startswith('hypnos_api_key_tokens_today{key="lab"}'):
            return float(line.split()[-1])
    return 0.0


def test_kill_9_mid_stream_keeps_the_overlay_and_the_quota(tmp_path):
    srv = _serve(tmp_path, KEYS)
    added = httpx.post(srv.base + "/v1/models", headers=AUTH, json={"config": ADDED},
                       timeout=120)
    assert added.status_code == 201 and added.json()["persisted"] is True
    assert chat(srv.base, AUTH).status_code == 200
    charged = _tokens_today(srv.base)
    assert charged > 0
    proc = _stream_in_background(srv.base, 2000, AUTH)
    _first_event(proc)
    srv.proc.kill()
    assert srv.proc.wait(10) == -signal.SIGKILL
    proc.communicate(timeout=30)
    assert proc.returncode != 0            # the client saw the connection break, not a hang
    srv.log.close()
    again = _serve(tmp_path, KEYS)
    try:
        listed = httpx.get(again.base + "/v1/models", headers=AUTH, timeout=30).json()
        assert {"chat", "smol2"} <= {m["id"] for m in listed["data"]}
        # The cut stream is charged at its end, which never came: the day's use is what was
        # charged before the kill, read back from the quota file.
        assert _tokens_today(again.base) == charged
        resp = chat(again.base, AUTH, model="smol2")
        assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
    finally:
        again.stop()


FSIZE_KB = 64


def test_a_full_disk_while_the_overlay_is_written_loses_nothing(tmp_path):
    """The server runs under a 64 KiB file-size limit (`ulimit -f`), so writing an overlay
    larger than that fails inside the write (EFBIG, the same path as ENOSPC): the change is
    live with persisted false, the overlay on disk is the previous one, whole, and nothing
    else is left behind; a restart brings back exactly what was persisted."""
    srv = _serve(tmp_path, "")          # builds models/ and hypnos.toml, then stops
    srv.stop()
    config = tmp_path / "hypnos.toml"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HYPNOS_MODELS_DIR": str(tmp_path / "models")}
    limited = ManagedProcess(lambda port: [
        "bash", "-c", f"ulimit -f {FSIZE_KB} && exec {sys.executable} -m hypnos.cli serve "
        f"--config {config} --port {port}"], tmp_path / "limited.log", "/ready", 180, env=env)
    try:
        small = httpx.post(limited.base + "/v1/models", json={"config": ADDED}, timeout=120)
        assert small.status_code == 201 and small.json()["persisted"] is True
        overlay = tmp_path / "hypnos.models.toml"
        before = overlay.read_text()
        big = ADDED.replace("smol2", "big").replace(
            "[[models]]\n", "[[models]]\n# " + "x" * (FSIZE_KB + 8) * 1024 + "\n")
        resp = httpx.post(limited.base + "/v1/models", json={"config": big}, timeout=120)
        assert resp.status_code == 201 and resp.json()["persisted"] is False
        live = httpx.get(limited.base + "/v1/models", timeout=30).json()["data"]
        assert {"smol2", "big"} <= {m["id"] for m in live}
        assert overlay.read_text() == before
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    finally:
        limited.stop()
    assert "File too large" in (tmp_path / "limited.log").read_text()   # the write did fail
    again = _serve(tmp_path, "")
    try:
        ids = {m["id"] for m in again.get("/v1/models")["data"]}
        assert "smol2" in ids and "big" not in ids
    finally:
        again.stop()

