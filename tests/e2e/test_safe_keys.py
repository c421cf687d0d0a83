"""One key's stored responses and named sessions stay its own, through a real `hypnos serve`
with an admin key and two user keys (alice, bob) and the official `openai` client; stored
responses survive a restart.

Another key's request for alice's response (GET, DELETE, input_items, previous_response_id,
input_tokens, the KV export of its conversation) is a 404 whose body is byte for byte the one
the same id gets once it no longer exists. Model: SmolLM2-135M, a few tokens per answer;
assertions hold whatever the greedy path (statuses, bodies compared with each other, token
counts that must be larger).
"""
from __future__ import annotations

import json

import httpx
import openai
import pytest

from model_dirs import ServerProcess, keyed_server, serve

ADMIN, ALICE, BOB = "sk-admin-safe", "sk-alice-safe", "sk-bob-safe"
CONFIG = keyed_server(ADMIN, alice=ALICE, bob=BOB) + """
[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smol.gguf"
context_len = 2048
slots = 4
"""
SHORT = {"max_output_tokens": 3, "temperature": 0}


class Server:
    """The running server; `restart` starts a new process on the same config and state."""

    def __init__(self, tmp) -> None:
        self.tmp = tmp
        self.proc = serve(tmp, CONFIG, smol=True)
        self.starts = 1

    @property
    def base(self) -> str:
        return self.proc.base

    def restart(self) -> None:
        self.proc.stop()
        self.starts += 1
        self.proc = ServerProcess(self.tmp / "hypnos.toml", self.tmp / f"server{self.starts}.log",
                                  ready_timeout=180,
                                  env={"HYPNOS_MODELS_DIR": str(self.tmp / "models")})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("safe-keys"))
    yield srv
    srv.proc.stop()


def client(server: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0, timeout=120)


def call(server: Server, key: str, method: str, path: str, body: dict | None = None
         ) -> httpx.Response:
    return httpx.request(method, server.base + path, json=body, timeout=120,
                         headers={"authorization": f"Bearer {key}"})


def probes(server: Server, key: str, rid: str) -> list[httpx.Response]:
    """Every way to reach a stored response by id."""
    return [call(server, key, "GET", f"/v1/responses/{rid}"),
            call(server, key, "DELETE", f"/v1/responses/{rid}"),
            call(server, key, "GET", f"/v1/responses/{rid}/input_items"),
            call(server, key, "POST", "/v1/responses",
                 {"model": "smol", "input": "Go on.", "previous_response_id": rid,
                  "max_output_tokens": 2}),
            call(server, key, "POST", "/v1/responses/input_tokens",
                 {"model": "smol", "input": "Go on.", "previous_response_id": rid}),
            call(server, key, "POST", "/v1/sessions/export",
                 {"model": "smol", "session_id": f"responses:{rid}"})]


def memory(server: Server, key: str) -> dict:
    return call(server, key, "GET", "/v1/memory/status").json()


def test_another_key_cannot_tell_alice_response_from_an_unknown_one(server):
    alice = client(server, ALICE)
    resp = alice.responses.create(model="smol", input="Name a color.", **SHORT)
    assert resp.store is True
    # Alice's conversation is bound to a slot under her key: she can export its KV.
    mine = call(server, ALICE, "POST", "/v1/sessions/export",
                {"model": "smol", "session_id": f"responses:{resp.id}"})
    assert mine.status_code == 200 and mine.json()["n_tok"] > 0

    while_stored = probes(server, BOB, resp.id)
    assert [r.status_code for r in while_stored] == [404] * 6
    assert client(server, ADMIN).responses.retrieve(resp.id).id == resp.id
    assert alice.responses.retrieve(resp.id).output_text == resp.output_text   # not deleted
    assert resp.id in json.dumps(memory(server, ADMIN)["stored_responses"])
    bobs_view = memory(server, BOB)
    assert resp.id not in json.dumps(bobs_view)
    assert bobs_view["stored_responses"]["count"] == 0

    alice.responses.delete(resp.id)
    once_gone = probes(server, BOB, resp.id)
    assert [r.content for r in while_stored] == [r.content for r in once_gone]
    assert [r.content for r in probes(server, ALICE, resp.id)][:5] == \
        [r.content for r in once_gone][:5]


def test_a_named_session_is_the_naming_key_own(server):
    def chat(key: str, text: str, session: str) -> None:
        client(server, key).chat.completions.create(
            model="smol", messages=[{"role": "user", "content": text}], max_tokens=2,
            temperature=0, extra_body={"session_id": session})

    def export(key: str, session: str) -> httpx.Response:
        return call(server, key, "POST", "/v1/sessions/export",
                    {"model": "smol", "session_id": session})

    chat(ALICE, "Alice's private notes: the launch code is tulip.", "notes")
    alices = export(ALICE, "notes")
    assert alices.status_code == 200 and alices.json()["n_tok"] > 0
    missing = export(BOB, "notes")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "session_not_found"
    assert missing.content == export(BOB, "never-named").content.replace(
        b"never-named", b"notes")

    chat(BOB, "Bob's own words.", "bob-own")
    bobs = export(BOB, "bob-own").json()
    assert call(server, BOB, "POST", "/v1/sessions/release",
                {"model": "smol", "session_id": "bob-own"}).status_code == 200
    restored = call(server, BOB, "POST", "/v1/sessions/restore",
                    {"model": "smol", "session_id": "notes", "blob": bobs["blob_b64"]})
    assert restored.status_code == 200 and restored.json()["n_tok"] == bobs["n_tok"]
    assert export(BOB, "notes").json()["n_tok"] == bobs["n_tok"]
    after = export(ALICE, "notes")
    assert after.status_code == 200 and after.json()["blob_b64"] == alices.json()["blob_b64"]
    assert call(server, BOB, "POST", "/v1/sessions/release",
                {"model": "smol", "session_id": "notes"}).status_code == 200
    assert export(ALICE, "notes").json()["n_tok"] == alices.json()["n_tok"]


def test_a_chain_continues_after_a_restart(server):
    alice = client(server, ALICE)
    first = alice.responses.create(
        model="smol", input="My name is Zed and I live in a lighthouse by the sea.", **SHORT)
    server.restart()
    alice = client(server, ALICE)
    assert alice.responses.retrieve(first.id).id == first.id
    with pytest.raises(openai.NotFoundError):
        client(server, BOB).responses.retrieve(first.id)
    fresh = call(server, ALICE, "POST", "/v1/responses/input_tokens",
                 {"model": "smol", "input": "Where do I live?"}).json()["input_tokens"]
    second = alice.responses.create(model="smol", input="Where do I live?",
                                    previous_response_id=first.id, **SHORT)
    assert second.status in ("completed", "incomplete") and second.store is True
    # The earlier turn was read back: the prompt holds it on top of the same question alone.
    assert second.usage.input_tokens > fresh + 10
    assert alice.responses.retrieve(second.id).previous_response_id == first.id
