"""`hypnos serve` as a real process on 127.0.0.1, driven by the official `openai` client, on
the real SmolLM2-135M model of the default lineup."""
import json
import subprocess
import sys
import time

import httpx
import openai
import pytest

from conftest import MODELS_DIR, ROOT, read_load_mode, require_smollm2

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
# SmolLM2-135M answers this one right under greedy decoding only with a terse system prompt.
QUESTION = [{"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What is the capital of France?"}]
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"


class Server(ServerProcess):
    def __init__(self, tmp_path, config: str):
        require_smollm2()
        path = tmp_path / "hypnos.toml"
        path.write_text(f'models_dir = "{MODELS_DIR}"\n' + config)
        super().__init__(path, tmp_path / "server.log", ready_timeout=120)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base + "/v1", api_key="unused", max_retries=0)


# No drafting: the streamed and the whole answer to one request are compared token for token,
# and a step with drafts (the second ask drafts from the first's answer) is another batch
# shape than one without.
CHAT = f"""
[[models]]
id = "smol"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "{GGUF}"
slots = 2
context_len = 4096
initial_tier = "tier1_gpu_vram"
speculative = "off"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("srv"), CHAT)
    yield srv
    srv.stop()


def ask(client, **kw):
    return client.chat.completions.create(
        model="smol", messages=QUESTION, temperature=0, max_tokens=24, **kw)


def test_openai_client_chat(server):
    raw = server.client().chat.completions.with_raw_response.create(
        model="smol", messages=QUESTION, temperature=0, max_tokens=24)
    assert raw.headers["x-request-id"].startswith("req-")
    resp = raw.parse()
    assert resp.choices[0].message.content.strip()       # its words depend on the CPU
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.prompt_tokens > 5 and resp.usage.completion_tokens > 0
    tele = resp.model_extra["hypnos_telemetry"]
    assert tele["previous_tier"] == "tier1_gpu_vram"      # staged at startup
    assert tele["placement"]["primary_tier"] == "tier1_gpu_vram"
    assert tele["placement"]["allocated_context_len"] == 4096
    assert tele["engine"]["decode_tokens_per_s"] > 0 and tele["inference_latency_ms"] > 0


def test_openai_client_stream(server):
    ask(server.client())               # warm-up: both runs below start with the prompt cached
    chunks = list(ask(server.client(), stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.strip()
    final = chunks[-1]
    assert final.choices[0].finish_reason in ("stop", "length")
    assert final.usage.completion_tokens > 0
    assert final.model_extra["hypnos_telemetry"]["engine"]["ttft_ms"] > 0
    same = ask(server.client())
    assert same.choices[0].message.content == text       # greedy: stream == non-stream


def test_sse_wire_format_ends_with_done(server):
    body = {"model": "smol", "stream": True, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.stream("POST", server.base + "/v1/chat/completions", json=body,
                      timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2][len("data: "):])
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["usage"]["completion_tokens"] == 4


def test_cancelled_stream_frees_its_slot(server):
    body = {"model": "smol", "stream": True, "max_tokens": 2000, "temperature": 0.9,
            "messages": [{"role": "user", "content": "Write a very long story about a fox."}]}
    with httpx.stream("POST", server.base + "/v1/chat/completions", json=body,
                      timeout=60) as r:
        for line in r.iter_lines():
            if '"content"' in line and '"role"' not in line:
                break          # one token arrived: hang up
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        smol = next(m for m in server.status()["models"] if m["id"] == "smol")
        if smol["active_leases"] == 0:
            break
        time.sleep(0.1)
    assert smol["active_leases"] == 0
    assert ask(server.client()).choices[0].message.content.strip()


def test_max_tokens_and_usage(server):
    resp = server.client().chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Count to one hundred."}],
        max_tokens=3, logit_bias={"0": -100, "2": -100})   # no end token: any CPU runs to 3
    assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 3


def test_penalties_and_min_p_run_on_the_real_engine(server):
    resp = server.client().chat.completions.create(
        model="smol", messages=QUESTION, max_tokens=12, temperature=0.7, seed=3,
        presence_penalty=0.5, frequency_penalty=0.5,
        extra_body={"repetition_penalty": 1.3, "min_p": 0.05})
    assert resp.choices[0].message.content and resp.usage.completion_tokens > 0


def test_errors_through_the_openai_client(server):
    client = server.client()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="smol", messages=[])


def test_second_turn_reuses_the_prefix_and_counts_it(server):
    client = server.client()
    first = ask(client)
    history = QUESTION + [{"role": "assistant", "content": first.choices[0].message.content},
                          {"role": "user", "content": "And of Italy?"}]
    second = client.chat.completions.create(model="smol", messages=history, temperature=0,
                                            max_tokens=8)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached and cached >= first.usage.prompt_tokens - 1
    assert second.model_extra["hypnos_telemetry"]["engine"]["cached_tokens"] == cached
    metrics = httpx.get(server.base + "/metrics").text
    hits = next(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith("hypnos_prefix_cache_hits_total"))
    reused = next(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("hypnos_prefix_cache_tokens_reused_total"))
    assert hits >= 1 and reused >= cached


def test_larger_num_ctx_rebuilds_the_context(server):
    """Runs after the other module tests: it leaves the model with a larger context."""
    client = server.client()
    small = client.chat.completions.create(model="smol", messages=QUESTION, max_tokens=2)
    assert small.model_extra["hypnos_telemetry"]["tier_switch_latency_ms"] == 0
    big = client.chat.completions.create(model="smol", messages=QUESTION, max_tokens=2,
                                         extra_body={"num_ctx": 3000})
    tele = big.model_extra["hypnos_telemetry"]
    assert tele["tier_switch_latency_ms"] > 0
    assert tele["placement"]["allocated_context_len"] == 6000      # 3000 per slot x 2 slots
    again = client.chat.completions.create(model="smol", messages=QUESTION, max_tokens=2,
                                           extra_body={"num_ctx": 2500})
    assert again.model_extra["hypnos_telemetry"]["tier_switch_latency_ms"] == 0


def booked_bytes(slots, ctx) -> int:
    from hypnos.engines.gguf_meta import read_gguf_meta
    from hypnos.planner import PlacementRequest, place
    shape = read_gguf_meta(MODELS_DIR / GGUF).to_shape()
    return place(PlacementRequest(shape, 1 << 40, slots=slots, context_len=ctx)).booked_tier1_bytes


def test_two_models_under_a_budget_for_one_evict_each_other(tmp_path):
    one = booked_bytes(1, 2048)
    vram = 512 * 2**20 + int(one * 1.5)
    cfg = f"[hardware.simulate]\nvram_bytes = {vram}\nram_bytes = {16 * 2**30}\n"
    for mid in ("a", "b"):
        cfg += (f'[[models]]\nid = "{mid}"\nmodality = "text_generation"\n'
                f'engine = "ggml_llama"\nweights_path = "{GGUF}"\ncontext_len = 2048\n')
    srv = Server(tmp_path, cfg)
    try:
        client = srv.client()

        def tele(mid):
            r = client.chat.completions.create(
                model=mid, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
            return r.model_extra["hypnos_telemetry"]
        first = tele("a")
        assert first["previous_tier"] == "tier3_nvme_ssd" and first["evicted_models"] == []
        assert first["tier_switch_latency_ms"] > 0
        assert first["tier_switch_phases"]["load_mode"] == read_load_mode()
        second = tele("b")
        assert second["evicted_models"] == ["a"]
        third = tele("a")
        assert third["previous_tier"] == "tier2_pinned_ram" and third["evicted_models"] == ["b"]
        assert tele("a")["tier_switch_latency_ms"] == 0
        status = srv.status()
        assert status["capabilities"]["simulated"] is True
        ev = status["recent_evictions"][0]
        assert ev["model"] == "b" and ev["for_model"] == "a" and ev["reason"] == "memory_budget"
        tiers = {m["id"]: m["current_tier"] for m in status["models"]}
        assert tiers == {"a": "tier1_gpu_vram", "b": "tier2_pinned_ram"}
    finally:
        srv.stop()


def test_serve_check(tmp_path):
    require_smollm2()
    path = tmp_path / "hypnos.toml"
    path.write_text(f'models_dir = "{MODELS_DIR}"\n' + CHAT)
    ok = subprocess.run([sys.executable, "-m", "hypnos.cli", "serve", "--check", "--config",
                         str(path)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    path.write_text(f'models_dir = "{MODELS_DIR}"\n' + CHAT.replace(GGUF, "missing.gguf"))
    bad = subprocess.run([sys.executable, "-m", "hypnos.cli", "serve", "--check", "--config",
                          str(path)], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "missing.gguf" in bad.stderr
