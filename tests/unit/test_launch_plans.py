"""hypnos launch, the pure parts: the model choice, the idle timeout, the refusal advice, each
client's plan and the printed script (cli/launch/). The runs against a real server and the
real clients are in tests/e2e/test_launch*.py."""
from __future__ import annotations

import json
import tomllib

import pytest

from hypnos.cli.client import ServerSaidNo
from hypnos.cli.launch import agents, editors
from hypnos.cli.launch.choice import Needs, NoModel, ServedModel, choose, shortfall
from hypnos.cli.launch.plan import Target, shell_script
from hypnos.cli.launch.server import idle_timeout_ms, refusal_advice

CLAUDE = agents.NEEDS["claude"]
SMALL = ServedModel("smol", 8192, True, resident=True)
CODER = ServedModel("coder", 32768, True)
BIG_NO_TOOLS = ServedModel("plain", 131072, False)


def test_the_first_tool_caller_that_holds_the_prompt_is_chosen():
    choice = choose([SMALL, BIG_NO_TOOLS, CODER], CLAUDE, cap=8192)
    assert choice.model is CODER and choice.warnings == ()
    assert choice.output_tokens == 8192          # 32,000 asked, clamped by max_tokens_cap


def test_a_resident_model_goes_before_one_listed_earlier():
    cold, warm = ServedModel("cold", 32768, True), ServedModel("warm", 32768, True, True)
    assert choose([cold, warm], CLAUDE, cap=8192).model is warm


def test_when_none_holds_the_prompt_the_largest_tool_caller_is_chosen_with_a_warning():
    mid = ServedModel("mid", 16384, True)
    choice = choose([SMALL, mid, BIG_NO_TOOLS], CLAUDE, cap=8192)
    assert choice.model is mid
    (warning,) = choice.warnings
    # 18,800 + 8,192 - 16,384 = 10,608 short; the figures and the setting are named
    assert "16,384" in warning and "18,800" in warning and "10,608 short" in warning
    assert "max_tokens_cap" in warning and "context_len" in warning


def test_a_named_model_is_taken_whatever_it_lacks_and_the_warnings_say_what():
    choice = choose([SMALL, CODER, BIG_NO_TOOLS], CLAUDE, cap=8192, named="plain")
    assert choice.model is BIG_NO_TOOLS
    assert any("no tool-call format" in w for w in choice.warnings)
    assert choose([SMALL, CODER], CLAUDE, cap=8192, named="coder").warnings == ()


def test_an_unknown_name_or_no_chat_model_is_refused():
    with pytest.raises(NoModel, match="no chat model 'nope'.*smol, coder"):
        choose([SMALL, CODER], CLAUDE, cap=8192, named="nope")
    with pytest.raises(NoModel, match="serves no chat model"):
        choose([], CLAUDE, cap=8192)


def test_the_cap_and_the_models_own_output_limit_shrink_what_must_fit():
    assert shortfall(CLAUDE, CODER, cap=8192) == 0
    assert shortfall(CLAUDE, CODER, cap=16000) == 18_800 + 16_000 - 32_768
    capped = ServedModel("capped", 20_000, True, max_output=1_000)
    assert shortfall(CLAUDE, capped, cap=8192) == 0
    assert shortfall(Needs("x", 100, 500), SMALL, cap=8192) == 0


def test_the_idle_timeout_follows_the_measured_prefill_speed_within_bounds():
    # 18,800 tokens at 100 tok/s: 3 x 188 s + 60 s = 624 s
    assert idle_timeout_ms(18_800, 100.0, 900) == 624_000
    assert idle_timeout_ms(18_800, 5_000.0, 900) == 300_000      # never below the 300 s default
    assert idle_timeout_ms(18_800, 10.0, 900) == 900_000         # never past the server's limit
    assert idle_timeout_ms(18_800, None, 1200) == 1_200_000      # unmeasured: the server's limit
    assert idle_timeout_ms(18_800, None, 60) == 300_000


def test_refusals_name_the_setting_to_change():
    no_key = refusal_advice(ServerSaidNo(401, "Missing API key", "invalid_request_error",
                                         None), "http://127.0.0.1:9999")
    assert "HYPNOS_API_KEY" in no_key and "server.api_keys" in no_key
    host = refusal_advice(ServerSaidNo(403, "Host not allowed", "permission_denied", None),
                          "http://box.lan:9999")
    assert 'add "box.lan" to server.allowed_hosts' in host


def target(**kw) -> Target:
    base = dict(url="http://127.0.0.1:9999", model="coder", models=(CODER, SMALL),
                context=32768, output_tokens=8192, idle_timeout_ms=624_000)
    return Target(**{**base, **kw})


def test_claude_gets_every_model_alias_its_limits_and_the_idle_timeout():
    plan = agents.claude(target())
    env = plan.env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9999"
    for name in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
                 "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        assert env[name] == "coder"
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == \
        "32768"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "8192"
    assert env["CLAUDE_STREAM_IDLE_TIMEOUT_MS"] == "624000"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "ANTHROPIC_API_KEY" in plan.unset and list(plan.files) == ["mcp.json"]
    # The pool's tools: an MCP config whose key Claude Code expands from its environment.
    assert plan.argv == ["claude", "--mcp-config", "{dir}/mcp.json"]
    server = json.loads(plan.files["mcp.json"])["mcpServers"]["hypnos"]
    assert server == {"type": "http", "url": "http://127.0.0.1:9999/mcp",
                      "headers": {"Authorization": "Bearer ${HYPNOS_API_KEY}"}}
    assert env["HYPNOS_API_KEY"] == "$HYPNOS_API_KEY"
    assert "MAX_THINKING_TOKENS" not in env                    # unknown: Claude Code decides
    assert agents.claude(target(thinking=False)).env["MAX_THINKING_TOKENS"] == "0"


def test_codex_gets_a_responses_provider_in_its_own_home():
    plan = agents.codex(target())
    config = tomllib.loads(plan.files["codex/config.toml"])
    assert config["model"] == "coder" and config["model_provider"] == "hypnos"
    assert config["model_context_window"] == 32768
    provider = config["model_providers"]["hypnos"]
    assert provider["base_url"] == "http://127.0.0.1:9999/v1"
    assert provider["wire_api"] == "responses" and provider["env_key"] == "HYPNOS_API_KEY"
    # Codex reads the server's model catalog only with both of these.
    assert provider["model_catalog_url"] == "http://127.0.0.1:9999/v1/models"
    assert config["features"]["api_key_model_discovery"] is True
    assert plan.resolved_env("/tmp/x", None)["CODEX_HOME"] == "/tmp/x/codex"


def test_opencode_lists_the_chat_models_with_their_limits():
    plan = agents.opencode(target())
    config = json.loads(plan.files["opencode.json"])
    assert config["model"] == "hypnos/coder"
    provider = config["provider"]["hypnos"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == "http://127.0.0.1:9999/v1"
    assert provider["options"]["apiKey"] == "{env:HYPNOS_API_KEY}"
    assert provider["models"]["coder"]["limit"] == {"context": 32768, "output": 8192}
    assert provider["models"]["smol"]["limit"] == {"context": 8192, "output": 8192}
    assert plan.resolved_env("/tmp/x", None)["OPENCODE_CONFIG"] == "/tmp/x/opencode.json"


def test_the_printed_script_never_shows_the_key_and_runs_the_client():
    plan = agents.claude(target())
    script = shell_script(plan, "/tmp/h", has_key=True)
    assert 'export ANTHROPIC_AUTH_TOKEN="$HYPNOS_API_KEY"' in script
    assert "unset ANTHROPIC_API_KEY" in script
    assert script.rstrip().endswith("claude --mcp-config /tmp/h/mcp.json")
    assert "export ANTHROPIC_AUTH_TOKEN=hypnos" in shell_script(plan, "/tmp/h", has_key=False)
    assert plan.resolved_env("/tmp/h", "sk-1")["ANTHROPIC_AUTH_TOKEN"] == "sk-1"
    codex = shell_script(agents.codex(target()), "/tmp/h", has_key=False)
    assert "cat > /tmp/h/codex/config.toml <<'HYPNOS_EOF'" in codex
    assert "export CODEX_HOME=/tmp/h/codex" in codex


@pytest.mark.parametrize("name", sorted(editors.PRINT_ONLY))
def test_the_print_only_clients_point_at_the_server(name):
    plan = editors.PRINT_ONLY[name](target())
    text = shell_script(plan, "/tmp/h", has_key=False)
    assert "http://127.0.0.1:9999/v1" in text
    if name != "open-webui":            # its connection lists the models itself
        assert "coder" in text and "32768" in text
