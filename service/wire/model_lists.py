"""The model lists' other shapes, rendered from `ModelFacts` (pure).

- **Codex's catalog** (``models``, beside OpenAI's ``data`` when the request carries Codex's
  ``client_version``): one entry per chat model with the fields Codex's model metadata reads
  (slug, display name, context window, reasoning efforts, shell and patch tools, input
  modalities, ...). With an entry for its model Codex plans against the real window instead
  of its fallback metadata (272,000 tokens) and prints no fallback warning. The choices that
  change how Codex drives the model are the ones of that fallback (a plain shell tool, no
  parallel calls, tool output truncated to 10,000 bytes), which Hypnos's Responses route
  serves; the instructions are Hypnos's short ones (`CODEX_INSTRUCTIONS`: Codex requires an
  entry to carry them).
- **Anthropic's list** (``GET /v1/models`` with an ``anthropic-version`` header, and
  ``GET /v1/models/{id}``): ``type: "model"``, ``display_name``, ``lifecycle``,
  ``created_at`` (RFC 3339), ``max_input_tokens`` (`compact_limit`: the window less room
  for the answer) and ``max_tokens`` (the largest answer).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class ModelFacts:
    """What the model lists tell of one model (``inference.model_facts.facts`` fills it)."""
    id: str
    alias_of: str | None
    context_window: int          # per slot, what the machine funds (0: not a text model)
    max_output_tokens: int       # limits.max_tokens_cap, never above the window
    tools: bool                  # its template (or the JSON fallback) carries tool calls
    thinks: bool                 # its template has a thinking block
    vision: bool                 # it reads images


# Codex's reasoning efforts this server maps onto a thinking budget
# (`hypnos.service.wire.responses.EFFORTS`), with the words Codex's picker shows.
EFFORT_WORDS = {"none": "No thinking block: the fastest answer",
                "low": "A short thinking budget",
                "medium": "A moderate thinking budget",
                "high": "The largest thinking budget"}
# Codex's tool output kept per call when its metadata does not say (its fallback's).
TOOL_OUTPUT_BYTES = 10_000
# Codex (0.171) takes a model's instructions from its catalog entry (``model_messages``, a
# required field) instead of its own long prompt: these, short so that a small model on a
# CPU reads them in seconds, name the job and the habits an agent needs.
CODEX_INSTRUCTIONS = """\
You are a coding agent working in the user's terminal, in the folder the user started you in.

- Do what the user asks, in as few steps as it takes. When a request is a question, answer it.
- Use the tools you are given to look at files and run commands before you change anything;
  never guess what a file holds.
- Change files with the smallest edit that does the job, then run what checks the change
  (a test, a build, the program itself) when one exists.
- A command that fails tells you something: read its output and try a different approach
  instead of repeating it.
- Keep replies short and plain: say what you did and what the user should know, and quote
  paths and commands exactly.
"""


def compact_limit(f: ModelFacts) -> int:
    """The prompt size at which an agent should compact: the window less room for the
    largest answer (at most a quarter of the window)."""
    return f.context_window - min(f.max_output_tokens, f.context_window // 4)


def codex_entry(f: ModelFacts, priority: int) -> dict:
    """One entry of Codex's ``models`` catalog (Codex's ``ModelInfo``)."""
    efforts = list(EFFORT_WORDS) if f.thinks else []
    return {
        "slug": f.id, "display_name": f.id,
        "description": (f"Served by Hypnos (alias of {f.alias_of})" if f.alias_of
                        else "Served by Hypnos"),
        "default_reasoning_level": "medium" if f.thinks else None,
        "supported_reasoning_levels": [{"effort": e, "description": EFFORT_WORDS[e]}
                                       for e in efforts],
        "shell_type": "default", "visibility": "list", "supported_in_api": True,
        "priority": priority, "upgrade": None, "availability_nux": None,
        "supports_reasoning_summaries": False, "supports_reasoning_summary_parameter": False,
        "default_reasoning_summary": "none", "supports_reasoning_effort_updates": False,
        "support_verbosity": False, "default_verbosity": None,
        "apply_patch_tool_type": None, "web_search_tool_type": "text",
        "supports_search_tool": False,
        "truncation_policy": {"mode": "bytes", "limit": TOOL_OUTPUT_BYTES},
        "supports_parallel_tool_calls": False, "supports_image_detail_original": False,
        "context_window": f.context_window, "max_context_window": f.context_window,
        "auto_compact_token_limit": compact_limit(f),
        "effective_context_window_percent": 95,
        "experimental_supported_tools": [],
        "model_messages": {"instructions_template": CODEX_INSTRUCTIONS},
        "input_modalities": ["text", "image"] if f.vision else ["text"],
        "prefer_websockets": False, "use_responses_lite": False,
        "include_skills_usage_instructions": False,
        "include_apps_usage_instructions": False,
        "include_plugin_usage_instructions": False,
        "available_in_plans": [], "additional_speed_tiers": [], "service_tiers": [],
        "default_service_tier": None,
    }


def codex_catalog(facts: list[ModelFacts]) -> list[dict]:
    """Codex's ``models``: the chat models that call tools (an agent drives the model with
    tools), in list order (Codex ranks them by ``priority``)."""
    return [codex_entry(f, rank) for rank, f in
            enumerate((f for f in facts if f.context_window and f.tools), start=1)]


def anthropic_model(f: ModelFacts, created: int) -> dict:
    """One model in Anthropic's shape (its ``ModelInfo``)."""
    return {"type": "model", "id": f.id, "display_name": f.id, "lifecycle": "active",
            "created_at": datetime.fromtimestamp(created, UTC)
            .isoformat().replace("+00:00", "Z"),
            "max_input_tokens": compact_limit(f), "max_tokens": f.max_output_tokens}


def anthropic_list(facts: list[ModelFacts], created: int) -> dict:
    """Anthropic's page of models: the text models, all on one page."""
    data = [anthropic_model(f, created) for f in facts if f.context_window]
    return {"data": data, "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}
