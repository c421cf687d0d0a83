"""``hypnos advise``: options, sizes, exit codes and the three output forms (real catalog)."""
from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner

from hypnos.cli import advise_cmd
from hypnos.cli.advise_cmd import advise
from hypnos.cli.params import parse_size
from hypnos.planner import GIB, MIB
from hypnos.service.config.load import parse_config
from hypnos.service.scheduling.hardware import usable_memory


def _run(*args):
    return CliRunner().invoke(advise, list(args))


@pytest.mark.parametrize("text,expected", [
    ("24G", 24 * GIB), ("24GiB", 24 * GIB), ("24gb", 24 * GIB), ("24000M", 24000 * MIB),
    ("1.5T", 3 * 1024**4 // 2), ("512k", 512 * 1024), ("25769803776", 25769803776),
    ("100B", 100), (" 8 G ", 8 * GIB), ("0", 0)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["24X", "-1G", "", "G", "1.2.3G", "24iB", "lots"])
def test_parse_size_refuses(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_json_body():
    r = _run("--needs", "chat,voice", "--vram", "24G", "--ram", "64G", "--json")
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    assert body["machine"] == {"vram_bytes": 24 * GIB, "ram_bytes": 64 * GIB,
                               "unified_memory": False}
    assert body["budgets"]["tier1_bytes"] == 24 * GIB - 512 * MIB
    served = {n for m in body["models"] for n in m["serves"]}
    assert served == {"chat", "voice"}
    # the lineup's small chat model fits a 24 GiB GPU whole, with the speech models
    assert body["interactive_coresident"] is True
    assert all(m["gpu_layers"] == m["num_layers"] for m in body["models"])


def test_whisper_and_kokoro_go_on_a_24g_nvidia_gpu():
    # Issue 17: this command put whisper large-v3 and Kokoro on the CPU of a 24 GB GPU.
    r = _run("--needs", "chat,voice", "--vram", "24G", "--ram", "64G", "--json")
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    by_name = {m["id"].split(":")[0]: m for m in body["models"]}
    assert "kokoro-82m-v1.0" in by_name
    voice = [m for m in body["models"] if "voice" in m["serves"]]
    assert len(voice) >= 2                # speech-to-text (whisper or Gemma 4 E4B) and Kokoro
    assert not [m["id"] for m in voice if m["runs_on_cpu"]]
    # What starts in VRAM fits it (the others wait in RAM until a request needs them).
    in_vram = [m for m in body["models"] if m["initial_tier"] == "tier1_gpu_vram"]
    assert sum(m["resident_bytes"] for m in in_vram) <= body["budgets"]["tier1_bytes"]


def test_config_output_loads():
    r = _run("--needs", "chat,voice,documents", "--vram", "24000M", "--ram", "64GiB", "--config")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("#")
    cfg = parse_config(tomllib.loads(r.output))
    assert cfg.config_version == 1 and cfg.models_dir.name == "models"
    assert {x for m in cfg.models for x in m.all_modalities} >= {
        "text_generation", "speech_to_text", "text_to_speech", "document_conversion"}


def test_table_for_people():
    r = _run("--needs", "chat", "--unified", "--ram", "32G")
    assert r.exit_code == 0, r.output
    assert "Recommended lineup" in r.output and "unified memory" in r.output
    assert "./run.sh models" in r.output


def test_unified_budgets():
    body = json.loads(_run("--needs", "chat", "--unified", "--ram", "32G", "--json").output)
    # 32 GiB x 2/3 = 22906492245 (< 28 GiB); tier 2 = 32 - 4 GiB - that = 7158278827
    assert body["budgets"] == {"tier1_bytes": 22906492245, "tier2_bytes": 7158278827,
                               "unified_memory": True}


def test_bad_size_is_a_usage_error_naming_it():
    r = _run("--needs", "chat", "--vram", "24X", "--ram", "64G")
    assert r.exit_code == 2
    assert "24X" in r.output and "--vram" in r.output


def test_unknown_need_is_a_usage_error_naming_it():
    r = _run("--needs", "chat,telepathy", "--vram", "24G", "--ram", "64G")
    assert r.exit_code == 2
    assert "telepathy" in r.output


def test_no_lineup_fits_exits_1_with_the_reason():
    r = _run("--needs", "chat", "--vram", "0", "--ram", "100M")
    assert r.exit_code == 1
    assert "'chat' does not fit" in r.output and "GiB short" in r.output


def test_json_and_config_exclude_each_other():
    r = _run("--needs", "chat", "--vram", "24G", "--ram", "64G", "--json", "--config")
    assert r.exit_code == 2


def test_ram_defaults_to_this_host():
    body = json.loads(_run("--needs", "chat", "--vram", "8G", "--json").output)
    assert body["machine"]["ram_bytes"] == usable_memory()
    assert body["machine"]["vram_bytes"] == 8 * GIB


def test_vram_defaults_to_this_host(monkeypatch):
    monkeypatch.setattr(advise_cmd, "_this_machine", lambda: (12 * GIB, 48 * GIB, False))
    body = json.loads(_run("--needs", "chat", "--json").output)
    assert body["machine"] == {"vram_bytes": 12 * GIB, "ram_bytes": 48 * GIB,
                               "unified_memory": False}
    body = json.loads(_run("--needs", "chat", "--ram", "16G", "--json").output)
    assert body["machine"]["ram_bytes"] == 16 * GIB and body["machine"]["vram_bytes"] == 12 * GIB
