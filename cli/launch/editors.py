"""Print-only plans for clients configured by a file of the user's own (hypnos launch prints
them; it runs none of these): Continue, Zed, Open WebUI. Pure."""
from __future__ import annotations

import json

from hypnos.cli.launch.plan import KEY_REF, KEY_VAR, Plan, Target


def continue_dev(t: Target) -> Plan:
    models = "".join(
        f"  - name: {m.id} (Hypnos)\n    provider: openai\n    model: {m.id}\n"
        f"    apiBase: {t.url}/v1\n    apiKey: ${{{{ secrets.{KEY_VAR} }}}}\n"
        f"    roles: [chat, edit, apply]\n"
        f"    capabilities: [{'tool_use' if m.tools else ''}]\n"
        f"    defaultCompletionOptions:\n      contextLength: {m.context}\n"
        f"      maxTokens: {min(t.output_tokens, m.context)}\n"
        for m in t.models)
    text = f"name: Hypnos\nversion: 0.0.1\nschema: v1\nmodels:\n{models}"
    return Plan("continue", [], files={"continue/config.yaml": text},
                notes=["Continue: merge continue/config.yaml into ~/.continue/config.yaml "
                       "(models), with HYPNOS_API_KEY among Continue's secrets"])


def zed(t: Target) -> Plan:
    settings = {"language_models": {"openai_compatible": {"Hypnos": {
        "api_url": t.url + "/v1",
        "available_models": [
            {"name": m.id, "display_name": f"{m.id} (Hypnos)", "max_tokens": m.context,
             "max_output_tokens": min(t.output_tokens, m.context),
             "capabilities": {"tools": m.tools, "images": False,
                              "parallel_tool_calls": False, "prompt_cache_key": False}}
            for m in t.models]}}}}
    return Plan("zed", ["zed"], {"HYPNOS_API_KEY": KEY_REF},
                files={"zed/settings.json": json.dumps(settings, indent=2) + "\n"},
                notes=["Zed: merge zed/settings.json into ~/.config/zed/settings.json; Zed "
                       "reads the key of provider \"Hypnos\" from HYPNOS_API_KEY"])


def open_webui(t: Target) -> Plan:
    return Plan("open-webui", ["open-webui", "serve"],
                {"OPENAI_API_BASE_URL": t.url + "/v1", "OPENAI_API_KEY": KEY_REF,
                 "ENABLE_OLLAMA_API": "false"},
                notes=["Open WebUI: its OpenAI connection points at Hypnos (or, in Docker, "
                       "pass these with -e)"])


PRINT_ONLY = {"continue": continue_dev, "zed": zed, "open-webui": open_webui}
