"""The plans of the agent CLIs hypnos launch runs: Claude Code, Codex, opencode. Pure: a
Target in, a Plan out.

Claude Code 2.1.x reads its environment and an MCP config file (--mcp-config: the pool's tools;
nothing is written to ~/.claude). What it
reads, found in the 2.1.197 binary: ``ANTHROPIC_MODEL`` and ``ANTHROPIC_SMALL_FAST_MODEL`` and
the ``ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL`` aliases; ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``
(the context of a model whose name does not start with "claude-", 200,000 by default) and
``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (auto-compact window, never below 100,000 but then capped by
the context), so it compacts at the served context; ``CLAUDE_STREAM_IDLE_TIMEOUT_MS`` (its
stream watchdog aborts and retries a stream with no event for this long; it can only raise the
300,000 default) and ``API_TIMEOUT_MS`` (the SDK's request timeout).
"""
from __future__ import annotations

import json

from hypnos.cli.launch.choice import Needs
from hypnos.cli.launch.plan import DIR, KEY_REF, KEY_VAR, Plan, Target
from hypnos.cli.mcp_config import mcp_config

# First requests measured on qwen2.5's template (docs/clients.md): Claude Code 2.1.197 sends
# about 18,800 tokens (24 tools) asking for 32,000; Codex 0.171.0 about 6,100 tokens.
NEEDS = {
    "claude": Needs("Claude Code", 18_800, 32_000),
    "codex": Needs("Codex", 6_100, 32_000),
    "opencode": Needs("opencode", 12_000, 32_000),
}
# How each is installed, for the message when it is missing.
INSTALL = {
    "claude": ("claude", "npm install -g @anthropic-ai/claude-code"),
    "codex": ("codex", "npm install -g @openai/codex"),
    "opencode": ("opencode", "npm install -g opencode-ai"),
}
PROVIDER = "hypnos"


def claude(t: Target) -> Plan:
    env = {
        "ANTHROPIC_BASE_URL": t.url,
        "ANTHROPIC_AUTH_TOKEN": KEY_REF,
        "ANTHROPIC_MODEL": t.model,
        "ANTHROPIC_SMALL_FAST_MODEL": t.model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": t.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": t.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": t.model,
        "CLAUDE_CODE_SUBAGENT_MODEL": t.model,
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(t.context),
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(t.context),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(t.output_tokens),
        "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(t.idle_timeout_ms),
        "API_TIMEOUT_MS": str(t.idle_timeout_ms),
        # No traffic to Anthropic (updates, telemetry, error reports), and no per-prompt
        # billing header in the system prompt, so two sessions share a cached prefix.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
    }
    if t.thinking is False:          # the server's catalog says it does not reason
        env["MAX_THINKING_TOKENS"] = "0"
    env[KEY_VAR] = KEY_REF
    # The pool as MCP tools (POST /mcp): Claude Code expands ${HYPNOS_API_KEY} in the file.
    mcp = mcp_config(t.url, "${" + KEY_VAR + "}")
    return Plan("claude", ["claude", "--mcp-config", f"{DIR}/mcp.json"], env,
                files={"mcp.json": json.dumps(mcp, indent=2) + "\n"},
                # an API key beside the token makes Claude Code warn of an auth conflict
                unset=("ANTHROPIC_API_KEY", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
                notes=[f"Claude Code on {t.model} at {t.url} (its environment, and the "
                       "pool's tools over MCP with --mcp-config)",
                       f"context {t.context:,}, answers up to {t.output_tokens:,} tokens, "
                       f"stream idle timeout {t.idle_timeout_ms // 1000} s"])


def codex(t: Target) -> Plan:
    lines = [
        f"model = {json.dumps(t.model)}",
        f"model_provider = {json.dumps(PROVIDER)}",
        f"model_context_window = {t.context}",
        f"model_auto_compact_token_limit = {t.context * 9 // 10}",
        "check_for_update_on_startup = false",
        "",
        f"[model_providers.{PROVIDER}]",
        'name = "Hypnos"',
        f"base_url = {json.dumps(t.url + '/v1')}",
        'wire_api = "responses"',
        f"env_key = {json.dumps(KEY_VAR)}",
        f"stream_idle_timeout_ms = {t.idle_timeout_ms}",
        # The server's model catalog (GET /v1/models?client_version=...): the real context
        # window, tools and reasoning, instead of Codex's fallback metadata and its warning.
        f"model_catalog_url = {json.dumps(t.url + '/v1/models')}",
        "",
        "[features]",
        "api_key_model_discovery = true",
        "",
        "[analytics]",
        "enabled = false",
    ]
    return Plan("codex", ["codex"], {"CODEX_HOME": f"{DIR}/codex", KEY_VAR: KEY_REF},
                files={"codex/config.toml": "\n".join(lines) + "\n"},
                notes=[f"Codex on {t.model} at {t.url}/v1 (a throwaway CODEX_HOME)",
                       f"Responses wire API, context {t.context:,}, stream idle timeout "
                       f"{t.idle_timeout_ms // 1000} s"])


def opencode(t: Target) -> Plan:
    models = {m.id: {"name": m.id, "tool_call": m.tools, "reasoning": bool(m.thinking),
                     "limit": {"context": m.context,
                               "output": t.output_tokens if m.id == t.model
                               else min(t.output_tokens, m.context)}}
              for m in t.models}
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"{PROVIDER}/{t.model}",
        "small_model": f"{PROVIDER}/{t.model}",
        "autoupdate": False,
        "share": "disabled",
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Hypnos",
            "options": {"baseURL": t.url + "/v1", "apiKey": "{env:" + KEY_VAR + "}",
                        "timeout": t.idle_timeout_ms},
            "models": models}},
    }
    return Plan("opencode", ["opencode"],
                {"OPENCODE_CONFIG": f"{DIR}/opencode.json", KEY_VAR: KEY_REF,
                 "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"},
                files={"opencode.json": json.dumps(config, indent=2) + "\n"},
                notes=[f"opencode on {t.model} at {t.url}/v1 (OPENCODE_CONFIG, merged over "
                       "your own config)",
                       f"{len(models)} model(s) listed with their context and output limits"])


BUILDERS = {"claude": claude, "codex": codex, "opencode": opencode}
