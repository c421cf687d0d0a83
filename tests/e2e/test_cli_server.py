"""The client commands (tier, ready, models list, bench, completion) against a real
`hypnos serve` on 127.0.0.1 with the real SmolLM2-135M and MiniLM models, an API key set."""
import json
import os
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner

from conftest import lineup_config, model_block, require_smollm2
from hypnos.bench.harness import ServerProcess, free_port
from hypnos.cli.main import cli

pytestmark = [pytest.mark.real, pytest.mark.slow]
KEY = "cli-test-key"
CONFIG = lineup_config(
    model_block("smol", "text_generation", slots=2, context_len=2048,
                initial_tier="tier1_gpu_vram"),
    model_block("minilm", "embeddings"), model_block("whisper", "speech_to_text"),
    model_block("kokoro", "text_to_speech"), server=f'api_keys = ["{KEY}"]')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_smollm2()
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "hypnos.toml").write_text(CONFIG)
    srv = ServerProcess(tmp / "hypnos.toml", tmp / "server.log", ready_timeout=120)
    yield srv
    srv.stop()


def hypnos(server, *args, key: str | None = KEY):
    env = {"HYPNOS_URL": server.base, "HYPNOS_API_KEY": key}
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def status(server) -> dict:
    return httpx.get(server.base + "/v1/memory/status",
                     headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()


def tier_of(server, model: str) -> str:
    return next(m for m in status(server)["models"] if m["id"] == model)["current_tier"]


def test_tier_picture_places_each_model_in_its_tier(server):
    r = hypnos(server, "tier")
    assert r.exit_code == 0, r.output
    tier1, rest = r.output.split("Tier 2")
    tier2, tier3 = rest.split("Tier 3")
    assert "smol" in tier1 and "30 gpu / 0 ram / 0 ssd" in tier1 and "booked" in tier1
    assert "minilm" in tier3 and "minilm" not in tier1 + tier2
    assert "Recent evictions" in tier3
    assert "\x1b[" not in r.output          # no colour codes when not on a terminal


def test_tier_json_is_the_status_body(server):
    r = hypnos(server, "tier", "--json")
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    assert {m["id"] for m in body["models"]} == {"smol", "minilm", "whisper", "kokoro"}
    assert body["tier1_vram_used_bytes"] > 0


def test_tier_move_down_and_back_up_with_a_context(server):
    r = hypnos(server, "tier", "move", "smol", "3", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["placement"]["primary_tier"] == "tier3_nvme_ssd"
    assert tier_of(server, "smol") == "tier3_nvme_ssd"
    r = hypnos(server, "tier", "move", "smol", "tier1_gpu_vram", "--context", "1024")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("smol: tier1_gpu_vram, 30 GPU layers")
    assert tier_of(server, "smol") == "tier1_gpu_vram"


def test_a_subcommand_takes_its_groups_url_and_key(server):
    r = CliRunner().invoke(cli, ["tier", "--url", server.base, "--api-key", KEY, "kv-park",
                                 "--json"], env={"HYPNOS_URL": None, "HYPNOS_API_KEY": None})
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["max_bytes"] > 0


def test_tier_watch_prints_one_json_body_per_refresh(server):
    r = hypnos(server, "tier", "--watch", "--interval", "0.1", "--count", "3", "--json")
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 3 and all("models" in json.loads(line) for line in lines)


def test_kv_park_enable_with_a_cap_then_disable(server):
    r = hypnos(server, "tier", "kv-park", "--enable", "--max-bytes", "1G", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["enabled"] is True
    assert status(server)["kv_park"]["max_bytes"] == 1024**3
    r = hypnos(server, "tier", "kv-park", "--disable")
    assert r.exit_code == 0 and r.output.startswith("KV parking off")
    assert status(server)["kv_park"]["enabled"] is False


def test_server_error_is_printed_as_is_with_exit_1(server):
    raw = httpx.post(server.base + "/v1/memory/tier", timeout=30,
                     headers={"Authorization": f"Bearer {KEY}"},
                     json={"model": "nope", "target_tier": "tier1_gpu_vram"}).json()
    r = hypnos(server, "tier", "move", "nope", "1")
    assert r.exit_code == 1
    assert f"Error: {raw['error']['message']} (404 model_not_found)" in r.output
    r = hypnos(server, "tier", "move", "nope", "1", "--json")
    assert r.exit_code == 1 and json.loads(r.output.split("Error:")[0]) == raw


def test_missing_key_is_the_servers_401_message(server):
    r = hypnos(server, "tier", key=None)
    assert r.exit_code == 1
    assert "Missing API key" in r.output and "401 invalid_request_error" in r.output


def test_exit_3_when_nothing_answers_and_2_on_usage(server):
    closed = f"http://127.0.0.1:{free_port()}"
    r = CliRunner().invoke(cli, ["tier", "--url", closed])
    assert r.exit_code == 3 and f"cannot reach the server at {closed}" in r.output
    r = CliRunner().invoke(cli, ["ready", "--url", closed, "--wait", "0.3"])
    assert r.exit_code == 3
    r = hypnos(server, "tier", "move", "smol", "4")
    assert r.exit_code == 2 and "is not a tier" in r.output


def test_ready_waits_and_answers(server):
    r = hypnos(server, "ready", "--wait", "5")
    assert r.exit_code == 0 and r.output == "ready\n"


def test_models_list_shows_the_servers_pool_else_the_catalog(server):
    r = hypnos(server, "models", "list", "--json")
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    assert body["source"] == "server" and body["url"] == server.base
    assert [m["id"] for m in body["data"]] == ["smol", "minilm", "whisper", "kokoro"]
    r = hypnos(server, "models", "list", "--modality", "embeddings")
    assert r.exit_code == 0 and "minilm" in r.output and "smol" not in r.output
    r = hypnos(server, "models", "list", "--catalog", "--json")
    assert json.loads(r.output)["source"] == "catalog"
    closed = f"http://127.0.0.1:{free_port()}"
    r = CliRunner().invoke(cli, ["models", "list", "--json", "--url", closed])
    assert r.exit_code == 0 and json.loads(r.output)["source"] == "catalog"


def test_model_ids_complete_from_the_server(server):
    env = {**os.environ, "_HYPNOS_COMPLETE": "bash_complete", "COMP_WORDS": "hypnos tier move ",
           "COMP_CWORD": "3", "HYPNOS_URL": server.base, "HYPNOS_API_KEY": KEY}
    out = subprocess.run([sys.executable, "-m", "hypnos.cli"], env=env, capture_output=True,
                         text=True, timeout=60).stdout.splitlines()
    assert out == ["plain,smol", "plain,minilm", "plain,whisper", "plain,kokoro"]


def test_bench_two_urls_side_by_side_json(server):
    """The same server given twice: every figure measured on both, ratios for each."""
    r = hypnos(server, "bench", "--url", server.base, "--url", server.base, "--json",
               "--only", "chat,concurrency,tier,embeddings", "--runs", "2",
               "--max-tokens", "6", "--concurrency", "1,2", "--embed-batch", "4")
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    keys = {"chat.ttft_ms_median", "chat.ttft_ms_p95", "chat.decode_tok_s_median",
            "concurrency.c1_tok_s", "concurrency.c2_tok_s", "tier.cold_tier3_ms",
            "tier.warm_tier2_ms", "tier.resident_tier1_ms", "embeddings.texts_per_s_median"}
    for target in body["targets"]:
        assert target["server"] == "hypnos" and not target["errors"]
        assert target["models"]["text_generation"] == "smol"
        metrics = target["metrics"]
        assert keys <= set(metrics)
        assert all(metrics[k]["value"] > 0 for k in keys)
        assert metrics["chat.ttft_ms_p95"]["value"] >= metrics["chat.ttft_ms_median"]["value"]
    assert keys <= set(body["ratios"]) and all(v > 0 for v in body["ratios"].values())
    assert tier_of(server, "smol") == "tier1_gpu_vram"     # the tier section ends resident


def test_bench_speech_and_transcription_table(server):
    """The speech model speaks the clip the transcription section then times."""
    r = hypnos(server, "bench", "--only", "transcription,speech,embeddings", "--runs", "1",
               "--embed-batch", "2")
    assert r.exit_code == 0, r.output
    for figure in ("transcription.rtf_median", "speech.ttfa_ms_median",
                   "embeddings.texts_per_s_median", f"{server.base} (hypnos)"):
        assert figure in r.output
    assert "FAILED" not in r.output


def test_bench_reports_a_failing_section_with_exit_1(server):
    r = hypnos(server, "bench", "--only", "embeddings", "--runs", "1",
               "--embedding-model", "nope")
    assert r.exit_code == 1
    assert "embeddings: FAILED 404: The model 'nope' does not exist" in r.output
