"""The model list in each client's shape against a real `hypnos serve`: OpenAI's list, Codex's
catalog (``?client_version=``, as Codex 0.171 asks) and Anthropic's (an ``anthropic-version``
header, through the official `anthropic` SDK's ``models.list()`` and ``.retrieve()``), each
telling the same funded context window as Ollama's /api/show.

Codex's entry is checked against our own reading of what Codex 0.171.0 refuses to decode
without: the fields an entry missing one of made Codex report "failed to decode models
response" and fall back to its guessed metadata (found by serving Codex its own bundled entry
with one field left out at a time), with the values its enums take.

Models: Qwen2.5-Coder-0.5B (Hermes tool calls, no thinking), SmolLM2 with a Qwen3-style
thinking template ("thinker"), SmolLM2 with a projector ("smol-vision"). No model is loaded:
the facts come from the GGUF headers and the planner.
"""
from __future__ import annotations

import anthropic
import httpx
import pytest

from model_dirs import serve

CONFIG = """
[[models]]
id = "qwen"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "qwen.gguf"
aliases = ["coder"]

[[models]]
id = "thinker"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "thinker.gguf"

[[models]]
id = "smol-vision"
modality = "text_generation"
modalities = ["vision"]
engine = "ggml_llama"
weights_path = "smol.gguf"
aux_path = "tiny-mmproj.gguf"
"""

# What a Codex 0.171 catalog entry must carry: field -> the JSON type (or the values) it takes.
CODEX_REQUIRED = {
    "slug": str, "display_name": str, "supported_reasoning_levels": list,
    "shell_type": {"default", "local", "unified_exec", "disabled", "shell_command"},
    "visibility": {"list", "hide", "none"}, "supported_in_api": bool, "priority": int,
    "support_verbosity": bool, "truncation_policy": dict,
    "experimental_supported_tools": list, "model_messages": dict,
}
CODEX_EFFORTS = {"none", "minimal", "low", "medium", "high", "xhigh"}


def codex_problems(entry: dict) -> list[str]:
    """What in ``entry`` Codex 0.171 would not decode (empty: none)."""
    out = []
    for field, kind in CODEX_REQUIRED.items():
        if field not in entry:
            out.append(f"missing {field}")
        elif isinstance(kind, set):
            if entry[field] not in kind:
                out.append(f"{field}={entry[field]!r}")
        elif not isinstance(entry[field], kind) or \
                (kind is int and isinstance(entry[field], bool)):
            out.append(f"{field} is not {kind.__name__}")
    policy = entry.get("truncation_policy") or {}
    if policy.get("mode") not in ("bytes", "tokens") or not isinstance(policy.get("limit"), int):
        out.append(f"truncation_policy={policy!r}")
    template = (entry.get("model_messages") or {}).get("instructions_template")
    if not isinstance(template, str) or not template.strip():
        out.append("model_messages.instructions_template is not a non-empty string")
    for level in entry.get("supported_reasoning_levels") or []:
        if level.get("effort") not in CODEX_EFFORTS or not isinstance(level.get("description"),
                                                                       str):
            out.append(f"reasoning level {level!r}")
    if not set(entry.get("input_modalities", ["text"])) <= {"text", "image"}:
        out.append(f"input_modalities={entry['input_modalities']!r}")
    if entry.get("default_reasoning_level") not in CODEX_EFFORTS | {None}:
        out.append(f"default_reasoning_level={entry['default_reasoning_level']!r}")
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = serve(tmp_path_factory.mktemp("lists"), CONFIG, qwen=True, smol=True, thinker=True,
                vision=True)
    yield srv
    srv.stop()


def get(server, path: str, **headers) -> httpx.Response:
    return httpx.get(server.base + path, headers=headers, timeout=30)


def windows(server) -> dict[str, int]:
    return {m["id"]: m["context_window"] for m in get(server, "/v1/models").json()["data"]}


def test_the_openai_list_has_no_codex_catalog_unless_asked(server):
    body = get(server, "/v1/models").json()
    assert body["object"] == "list" and "models" not in body
    assert {m["id"] for m in body["data"]} == {"qwen", "coder", "thinker", "smol-vision"}
    coder = next(m for m in body["data"] if m["id"] == "coder")
    assert coder["alias_of"] == "qwen"
    assert all(isinstance(m["context_window"], int) and m["context_window"] > 0
               for m in body["data"])


def test_codex_catalog_beside_the_data_list(server):
    body = get(server, "/v1/models?client_version=0.171.0").json()
    told = windows(server)
    assert [m["id"] for m in body["data"]] == list(told)
    entries = {e["slug"]: e for e in body["models"]}
    assert set(entries) == set(told)            # every model here calls tools (or JSON ones)
    for slug, e in entries.items():
        assert codex_problems(e) == [], slug
        assert e["context_window"] == e["max_context_window"] == told[slug]
        assert 0 < e["auto_compact_token_limit"] < e["context_window"]
    assert sorted(e["priority"] for e in entries.values()) == list(range(1, len(entries) + 1))
    # Reasoning: offered for the thinking template only.
    assert entries["qwen"]["supported_reasoning_levels"] == []
    assert entries["qwen"]["default_reasoning_level"] is None
    efforts = [x["effort"] for x in entries["thinker"]["supported_reasoning_levels"]]
    assert "none" in efforts and "high" in efforts
    assert entries["thinker"]["default_reasoning_level"] in efforts
    # Modalities: images for the model with a projector only.
    assert entries["smol-vision"]["input_modalities"] == ["text", "image"]
    assert entries["qwen"]["input_modalities"] == ["text"]


def test_the_window_is_the_one_every_client_is_told(server):
    told = windows(server)
    for mid in ("qwen", "thinker"):
        show = httpx.post(server.base + "/api/show", json={"model": mid}, timeout=30).json()
        assert show["model_info"]["context_length"] == told[mid]
    # Qwen2.5-Coder-0.5B is trained for 32768; a small model fits that on any test machine.
    assert told["qwen"] == 32768


def test_the_codex_structure_check_catches_a_broken_entry():
    good = {"slug": "m", "display_name": "m", "supported_reasoning_levels": [],
            "shell_type": "default", "visibility": "list", "supported_in_api": True,
            "priority": 1, "support_verbosity": False,
            "truncation_policy": {"mode": "bytes", "limit": 10000},
            "experimental_supported_tools": [], "model_messages": {
                "instructions_template": "x"}}
    assert codex_problems(good) == []
    assert codex_problems({k: v for k, v in good.items() if k != "model_messages"})
    assert codex_problems({**good, "shell_type": "bash"})
    assert codex_problems({**good, "priority": True})
    assert codex_problems({**good, "supported_reasoning_levels": [{"effort": "max"}]})


def test_anthropic_sdk_lists_and_retrieves(server):
    client = anthropic.Anthropic(base_url=server.base, api_key="unused", max_retries=0)
    told = windows(server)
    page = client.models.list()
    ids = [m.id for m in page.data]
    assert ids == list(told)
    assert page.has_more is False and page.first_id == ids[0] and page.last_id == ids[-1]
    for m in page.data:
        assert m.type == "model" and m.display_name == m.id and m.lifecycle == "active"
        assert m.max_tokens is not None and m.max_input_tokens is not None
        assert 0 < m.max_input_tokens < told[m.id]
        assert m.max_input_tokens + min(m.max_tokens, told[m.id] // 4) == told[m.id]
    one = client.models.retrieve("coder")
    assert one.id == "coder" and one.max_input_tokens == next(
        m.max_input_tokens for m in page.data if m.id == "coder")
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("nope")


def test_one_model_without_the_header_is_its_openai_row(server):
    row = get(server, "/v1/models/thinker").json()
    assert row["id"] == "thinker" and row["object"] == "model"
    assert row["context_window"] == windows(server)["thinker"]
    missing = get(server, "/v1/models/nope")
    assert missing.status_code == 404 and missing.json()["error"]["type"]
    # An anthropic client gets Anthropic's envelope.
    missing = get(server, "/v1/models/nope", **{"anthropic-version": "2023-06-01"})
    assert missing.status_code == 404 and missing.json()["type"] == "error"
    assert missing.json()["error"]["type"] == "not_found_error"
