"""The config tree: defaults, validation messages with dotted keys, overrides, overlay."""
import os
import tomllib
from pathlib import Path

import pytest

from hypnos.service.config.load import (ConfigError, load_config, overlay_path, parse_model_block,
                                   resolve_model_file)
from hypnos.service.config.schema import LimitsConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "service" / "examples"

CHAT = """
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "chat.gguf"
"""


def write(tmp_path: Path, text: str, name="hypnos.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_follow_the_spec():
    cfg = load_config(None, env={})
    assert cfg.server.port == 9999
    limits = LimitsConfig()
    assert limits.max_body_bytes == 256 * 2**20
    assert limits.max_audio_bytes == 64 * 2**20
    assert limits.max_tokens_cap == 8192
    assert limits.max_queue_per_model == 8
    assert limits.request_timeout_secs == 900
    assert limits.allow_private_urls is False
    assert cfg.server.request_log.capacity == 200


def test_error_names_file_dotted_key_and_value(tmp_path):
    p = write(tmp_path, CHAT + CHAT.replace('"chat"', '"b"').replace("chat.gguf", "b.gguf")
              + CHAT.replace('"chat"', '"c"') + "slots = 0\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p, env={})
    assert "hypnos.toml: models[2].slots: must be >= 1, got 0" in exc.value.problems


def test_every_problem_is_reported_at_once(tmp_path):
    p = write(tmp_path, "[server]\nport = 70000\nbogus = 1\n[limits]\nmax_tokens_cap = 'x'\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p, env={})
    text = str(exc.value)
    assert "server.bogus: unknown setting" in text
    assert "limits.max_tokens_cap: must be int" in text


def test_enum_values_are_checked(tmp_path):
    p = write(tmp_path, CHAT + 'priority = "urgent"\n')
    with pytest.raises(ConfigError, match=r"models\[0\].priority: must be one of low, normal"):
        load_config(p, env={})


def test_missing_required_model_field(tmp_path):
    p = write(tmp_path, '[[models]]\nid = "x"\nengine = "ggml_llama"\nweights_path = "a"\n')
    with pytest.raises(ConfigError, match=r"modality: required"):
        load_config(p, env={})


@pytest.mark.parametrize("rel", ["../outside.gguf", "/etc/passwd", "a/../../x.gguf"])
def test_model_files_outside_models_dir_are_refused(tmp_path, rel):
    p = write(tmp_path, CHAT.replace("chat.gguf", rel))
    with pytest.raises(ConfigError, match="resolves outside models_dir"):
        load_config(p, env={})


def test_symlink_out_of_models_dir_is_refused(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (tmp_path / "secret.gguf").write_bytes(b"x")
    os.symlink(tmp_path / "secret.gguf", models / "link.gguf")
    with pytest.raises(ValueError, match="outside"):
        resolve_model_file(models, "link.gguf")
    (models / "inside.gguf").write_bytes(b"x")
    assert resolve_model_file(models, "inside.gguf") == (models / "inside.gguf").resolve()


def test_env_and_flag_overrides(tmp_path):
    p = write(tmp_path, "[server]\nport = 8000\n")
    assert load_config(p, env={}).server.port == 8000
    cfg = load_config(p, env={"HYPNOS_PORT": "8100", "HYPNOS_API_KEYS": "k1, k2"})
    assert cfg.server.port == 8100 and cfg.server.api_keys == ["k1", "k2"]
    assert load_config(p, env={"HYPNOS_PORT": "8100"}, port=8200).server.port == 8200
    with pytest.raises(ConfigError, match="HYPNOS_PORT"):
        load_config(p, env={"HYPNOS_PORT": "nope"})


def test_models_dir_is_relative_to_the_config_file(tmp_path):
    p = write(tmp_path, 'models_dir = "weights"\n')
    assert load_config(p, env={}).models_dir == tmp_path / "weights"


def test_overlay_adds_replaces_and_removes(tmp_path):
    p = write(tmp_path, CHAT + CHAT.replace('"chat"', '"old"'))
    assert overlay_path(p).name == "hypnos.models.toml"
    overlay_path(p).write_text('removed = ["old"]\n' + CHAT.replace("chat.gguf", "new.gguf")
                               + CHAT.replace('"chat"', '"added"'))
    cfg = load_config(p, env={})
    assert [m.id for m in cfg.models] == ["chat", "added"]
    assert cfg.model("chat").weights_path == "new.gguf"


def test_parse_model_block():
    m = parse_model_block(CHAT + "slots = 3\n[models.arch]\nnum_layers = 12\n")
    assert m.id == "chat" and m.slots == 3 and m.arch.num_layers == 12
    with pytest.raises(ConfigError, match="exactly one"):
        parse_model_block(CHAT + CHAT)
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_model_block("[[models]\n")


def test_keys_and_simulate_tables(tmp_path):
    p = write(tmp_path, """
[server]
api_keys = ["admin-key"]
[[server.keys]]
key = "user-key"
label = "alice"
requests_per_minute = 10
[hardware]
kv_park = true
[hardware.simulate]
vram_bytes = 8589934592
ram_bytes = 17179869184
""")
    cfg = load_config(p, env={})
    assert cfg.server.keys[0].label == "alice" and not cfg.server.keys[0].admin
    assert cfg.hardware.simulate.vram_bytes == 8 * 2**30


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_example_configs_load(path):
    cfg = load_config(path, env={})
    assert cfg.models, f"{path.name} configures no model"


def test_examples_exist():
    names = {p.name for p in EXAMPLES.glob("*.toml")}
    assert {"hypnos.example.toml", "hypnos.gpu24.example.toml",
            "hypnos.apple.example.toml"} <= names


def test_default_lineup_example_matches_catalog():
    from hypnos.catalog.catalog import load_catalog
    from hypnos.service.config.lineup import default_lineup_text
    shipped = tomllib.loads((EXAMPLES / "hypnos.example.toml").read_text())
    assert shipped == tomllib.loads(default_lineup_text(load_catalog()))
