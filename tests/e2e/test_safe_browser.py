"""A web page cannot drive a default install (no API keys) of `hypnos serve`: its requests,
simulated here with the headers a browser sends, are refused with 403 and nothing happens
(no pull, no change to the saved pool, no model loaded, no tokens generated), while the same
requests without an Origin, as curl sends them, still work (issue 35; service/http/browser.py).

A CORS-simple request (``Content-Type: text/plain``, no preflight) from any page carries
``Origin``; DNS rebinding reaches the port under the page's own name, so ``Host`` names the
foreign site."""
from __future__ import annotations

import json
import os

import httpx
import pytest

from conftest import require_smollm2
from model_dirs import serve

pytestmark = [pytest.mark.real]

CONFIG = """
[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
context_len = 512
"""
# The catalog's SmolLM2 file, linked into models_dir, so a pull finds it in place offline.
PULLED = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
PAGE = {"origin": "http://evil.example", "content-type": "text/plain"}
CURL = {"content-type": "application/x-www-form-urlencoded"}    # curl -d's default
CHAT = {"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("safe-browser")
    (tmp / "models" / PULLED).parent.mkdir(parents=True)
    os.link(require_smollm2(), tmp / "models" / PULLED)
    srv = serve(tmp, CONFIG, smol=True)
    srv.overlay = tmp / "hypnos.models.toml"
    yield srv
    srv.stop()


def send(server, method: str, path: str, body: dict, headers: dict) -> httpx.Response:
    return httpx.request(method, server.base + path, content=json.dumps(body),
                         headers=headers, timeout=120)


def names(server) -> set[str]:
    return {m["model"] for m in server.get("/api/tags")["models"]}


def chats_run(server) -> float:
    """Chat requests the engines ran (each is a prefix-cache hit or a miss)."""
    text = httpx.get(server.base + "/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith((
        "hypnos_prefix_cache_hits_total ", "hypnos_prefix_cache_misses_total ")))


def smol_tier(server) -> str:
    return next(m["current_tier"] for m in server.get("/v1/models")["data"]
                if m["id"] == "smol")


def refused(resp: httpx.Response, named: str) -> None:
    assert resp.status_code == 403, resp.text
    body = resp.json()
    message = body["error"] if isinstance(body["error"], str) else body["error"]["message"]
    assert named in message


def test_a_page_cannot_pull_nor_a_rebound_host_delete_but_curl_can(server):
    before = names(server)
    pull = {"model": "smollm2:135m", "stream": False}
    refused(send(server, "POST", "/api/pull", pull, PAGE), "evil.example")
    assert names(server) == before and not server.overlay.exists()
    resp = send(server, "POST", "/api/pull", pull, CURL)
    assert resp.status_code == 200 and resp.json()["status"] == "success", resp.text
    assert names(server) == before | {"smollm2:135m"}
    saved = server.overlay.read_text()
    assert "smollm2:135m" in saved
    rebound = {"host": "evil.example:" + server.base.rsplit(":", 1)[1]}
    refused(send(server, "DELETE", "/api/delete", {"model": "smollm2:135m"}, rebound),
            "evil.example")
    assert "smollm2:135m" in names(server) and server.overlay.read_text() == saved
    assert (server.overlay.parent / "models" / PULLED).exists()
    resp = send(server, "DELETE", "/api/delete", {"model": "smollm2:135m"}, {})
    assert resp.status_code == 200, resp.text
    assert names(server) == before and not (server.overlay.parent / "models" / PULLED).exists()


def test_a_page_cannot_chat_but_curl_can(server):
    ran = chats_run(server)
    refused(send(server, "POST", "/v1/chat/completions", CHAT, PAGE), "evil.example")
    refused(send(server, "POST", "/api/chat", {**CHAT, "stream": False}, PAGE),
            "evil.example")
    assert chats_run(server) == ran and smol_tier(server) == "tier3_nvme_ssd"
    resp = send(server, "POST", "/v1/chat/completions", CHAT, CURL)
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] >= 1
    assert chats_run(server) == ran + 1
