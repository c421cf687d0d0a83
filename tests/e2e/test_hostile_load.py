"""Load on a real `hypnos serve` over loopback, bounded in count and time.

- 64 clients arrive at once on SmolLM2 with slots = 2 and max_queue_per_model = 8: admission
  is decided when a request arrives, so exactly slots + max_queue (10) are admitted as long as
  none of them finishes before the last one arrived (the test checks that premise instead of
  assuming it), and the other 54 get 429 model_busy. Every admitted request completes and no
  lease is left behind. The latency percentiles are printed (pytest -s shows them).
- Four modalities under a simulated 300 MiB tier 1, where the chat model fits only with layers
  left out and at most two of the small models fit together; two clients each cycle through
  the modalities, so the server evicts every few requests. Every answer is a spec status in
  the envelope, and a model with a request running in it is always resident (polled from
  /v1/memory/status meanwhile).
"""
import asyncio
import io
import statistics
import time
import wave

import httpx
import pytest

from conftest import MODELS_DIR, lineup_config, model_block, require_smollm2

from hypnos.bench.harness import ServerProcess

pytestmark = [pytest.mark.real, pytest.mark.slow]

CLIENTS, SLOTS, QUEUE = 64, 2, 8
# SmolLM2's end tokens (<|endoftext|>, <|im_end|>) banned, so every answer runs to max_tokens.
NO_EOS = {"0": -100, "2": -100}
MAX_TOKENS = 32

CHAT = f"""models_dir = "{MODELS_DIR}"
[limits]
max_queue_per_model = {QUEUE}
repetition_loop_tokens = 0
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
slots = {SLOTS}
context_len = 4096     # 2048 a slot: no context rebuild on the burst
initial_tier = "tier1_gpu_vram"
"""


def serve(tmp, config: str) -> ServerProcess:
    path = tmp / "hypnos.toml"
    path.write_text(config)
    return ServerProcess(path, tmp / "server.log", ready_timeout=180,
                         env={"HYPNOS_MODELS_DIR": str(MODELS_DIR)})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def idle(srv: ServerProcess) -> None:
    """No lease, hold or queued request left on any model."""
    for m in srv.get("/v1/models")["data"]:
        assert m["active_leases"] == 0, m
    for m in srv.status()["models"]:
        assert m["active_leases"] == 0 and m["queued"] == 0 and m["running"] == 0, m


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory):
    require_smollm2()
    srv = serve(tmp_path_factory.mktemp("load"), CHAT)
    yield srv
    srv.stop()


async def _burst(base: str) -> list[tuple[int, dict, float, float]]:
    """CLIENTS requests released together; (status, body, sent, answered) each."""
    go = asyncio.Event()
    body = {"model": "chat", "max_tokens": MAX_TOKENS, "temperature": 0, "logit_bias": NO_EOS,
            "messages": [{"role": "user", "content": "Count from one to two hundred."}]}
    limits = httpx.Limits(max_connections=CLIENTS + 8)
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
        async def one():
            await go.wait()
            sent = time.monotonic()
            resp = await client.post("/v1/chat/completions", json=body)
            return resp.status_code, resp.json(), sent, time.monotonic()
        tasks = [asyncio.create_task(one()) for _ in range(CLIENTS)]
        await asyncio.sleep(0.2)        # every task is parked on the event
        go.set()
        return await asyncio.gather(*tasks)


def test_64_clients_on_two_slots_and_a_queue_of_8(chat_server):
    results = asyncio.run(_burst(chat_server.base))
    admitted = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] != 200]
    # The premise: everybody had arrived (and been refused) before the first answer came back.
    assert admitted and refused
    assert max(r[3] for r in refused) < min(r[3] for r in admitted), \
        "an admitted request finished before all arrivals were decided; raise MAX_TOKENS"
    assert len(admitted) == SLOTS + QUEUE
    assert len(refused) == CLIENTS - SLOTS - QUEUE
    for status, body, _, _ in refused:
        assert status == 429 and body["error"]["type"] == "model_busy", body
        assert "max_queue_per_model" in body["error"]["message"]
    for _, body, _, _ in admitted:
        assert body["usage"]["completion_tokens"] == MAX_TOKENS
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["choices"][0]["message"]["content"]
    idle(chat_server)
    ok = [(r[3] - r[2]) * 1000 for r in admitted]
    no = [(r[3] - r[2]) * 1000 for r in refused]
    print(f"\nload: {len(admitted)} admitted p50 {statistics.median(ok):.0f} ms "
          f"p99 {percentile(ok, 0.99):.0f} ms; {len(refused)} refused (429) p50 "
          f"{statistics.median(no):.0f} ms p99 {percentile(no, 0.99):.0f} ms")


# ------------------------------------------------------------------ mixed modalities

MIXED = lineup_config(
    model_block("chat", "text_generation", context_len=1024),
    model_block("whisper", "speech_to_text"), model_block("kokoro", "text_to_speech"),
    model_block("minilm", "embeddings"),
    tables=f"[hardware.simulate]\nvram_bytes = {(512 + 300) * 2**20}\nram_bytes = {8 * 2**30}\n")
# 429 model_busy, 503 (deadline / not available), 507 (does not fit beside the leased models).
SPEC_REFUSALS = {429: {"model_busy"}, 503: {"model_not_available", "deadline_unmeetable"},
                 507: {"insufficient_vram_or_ram", "process_memory_cap"}}
ROUNDS, MIXED_BOUND_S = 3, 240


def _tone_wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x10" * 16000)
    return buf.getvalue()


def _calls(wav: bytes) -> dict:
    return {
        "chat": dict(url="/v1/chat/completions", json={
            "model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}),
        "minilm": dict(url="/v1/embeddings", json={"model": "minilm", "input": ["a", "b"]}),
        "kokoro": dict(url="/v1/audio/speech", json={
            "model": "kokoro", "voice": "alloy", "input": "Hello there."}),
        "whisper": dict(url="/v1/audio/transcriptions", data={"model": "whisper"},
                        files={"file": ("a.wav", wav, "audio/wav")}),
    }


async def _mixed(base: str) -> tuple[dict, list[str], list[dict]]:
    calls = _calls(_tone_wav())
    served = {m: 0 for m in calls}
    problems: list[str] = []
    snapshots: list[dict] = []
    stop = time.monotonic() + MIXED_BOUND_S
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        async def ask(model: str) -> bool:
            """One call, retried on the spec's refusals; False on anything else."""
            while time.monotonic() < stop:
                resp = await client.post(**calls[model])
                if resp.status_code == 200:
                    served[model] += 1
                    return True
                kind = resp.json().get("error", {}).get("type")
                if kind not in SPEC_REFUSALS.get(resp.status_code, ()):
                    problems.append(f"{model}: {resp.status_code} {resp.text[:300]}")
                    return False
                await asyncio.sleep(0.05)
            problems.append(f"{model}: not served within {MIXED_BOUND_S} s")
            return False

        async def user(order: list[str]):
            for _ in range(ROUNDS):
                for model in order:
                    if not await ask(model):
                        return

        async def watch():
            while True:
                snapshots.append((await client.get("/v1/memory/status")).json())
                await asyncio.sleep(0.02)
        watcher = asyncio.create_task(watch())
        order = list(calls)
        await asyncio.gather(user(order), user(order[2:] + order[:2]))
        watcher.cancel()
    return served, problems, snapshots


def test_mixed_modalities_under_a_simulated_budget_that_forces_evictions(tmp_path):
    require_smollm2()
    srv = serve(tmp_path, MIXED)
    try:
        served, problems, snapshots = asyncio.run(_mixed(srv.base))
        assert problems == []
        assert served == {m: 2 * ROUNDS for m in served}
        status = srv.status()
        assert status["capabilities"]["simulated"] is True
        assert len(status["recent_evictions"]) >= 2 * ROUNDS
        running_off_tier1 = [(m["id"], m["current_tier"]) for s in snapshots
                             for m in s["models"]
                             if m["running"] > 0
                             and m["current_tier"] != "tier1_gpu_vram"]
        assert running_off_tier1 == []
        assert len(snapshots) > 20
        idle(srv)
        print(f"\nmixed: {sum(served.values())} served, "
              f"{len(status['recent_evictions'])} evictions (last 32 kept)")
    finally:
        srv.stop()
