"""The OpenAPI document states what the chat dialects' body parsers enforce: a body drawn from
the document's own schema for a route passes that route's parsers, or is refused only by a
rule the schema cannot state (a rule across fields or turns, a keep_alive duration over a
year: those bench/schemathesis.toml lists). Pure: the parsers with the default limits, no
model and no server; schemathesis draws the bodies from /openapi.json with a fixed seed, so
the same bodies are drawn on every machine.

A refusal a schema could state (a role, a block in the wrong turn, a missing field) makes
this fail, naming the route and the message: fix the wire model so the document says it."""
from __future__ import annotations

import json
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from hypnos.service.config.schema import LimitsConfig
from hypnos.service.errors import InvalidRequest
from hypnos.service.wire import json_text, messages, ollama, responses, responses_in
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.model import validate

from test_http import app_for, call

LIMITS = LimitsConfig()
EXAMPLES = 40


def _chat(body: dict) -> None:
    parse_chat(body, LIMITS)


def _messages(body: dict) -> None:
    _chat(messages.to_chat_body(body)[1])


def _count_tokens(body: dict) -> None:
    _chat(messages.count_body(body))


def _responses(body: dict) -> None:
    wire = responses.parse_body(body)
    _chat(responses_in.to_chat_body(wire, [])[0])


def _input_tokens(body: dict) -> None:
    _chat(responses_in.chat_body(responses.count_body(body), [])[0])


def _ollama_chat(body: dict) -> None:
    wire, chat = ollama.chat_body(body)
    ollama.keep_alive_secs(wire.keep_alive)
    _chat(chat)


def _ollama_generate(body: dict) -> None:
    wire = ollama.parse_generate(body)
    ollama.keep_alive_secs(wire.keep_alive)
    _chat(ollama.generate_chat_body(wire))


def _embed(model) -> object:
    def parse(body: dict) -> None:
        ollama.keep_alive_secs(validate(model, body).keep_alive)
    return parse


# The refusals no schema states: a rule across fields or turns, a duration string's total,
# what the structured-output grammar can express of a schema.
CROSS_FIELD = {
    "tool_choice": r"'tool_choice' (needs|names|of type)",
    "earlier call": r"which no earlier (tool_use block|function_call) has",
    "a function tool": r"needs a function tool|not a function in 'tools'",
    "a year": r"^'keep_alive' is '.*at most a year$",
    "the grammar's limits": r"^'format' is a JSON schema the answer's grammar cannot express",
}
ROUTES = {
    "/v1/chat/completions": _chat,
    "/v1/messages": _messages,
    "/v1/messages/count_tokens": _count_tokens,
    "/v1/responses": _responses,
    "/v1/responses/input_tokens": _input_tokens,
    "/api/chat": _ollama_chat,
    "/api/generate": _ollama_generate,
    "/api/embed": _embed(ollama.EmbedBody),
    "/api/embeddings": _embed(ollama.EmbeddingsBody),
}


@pytest.fixture(scope="module")
def document():
    import asyncio
    return asyncio.run(call(app_for(), "get", "/openapi.json")).json


def _unstated(parse, body) -> str | None:
    """The message of a refusal the schema should have stated, or None. The body goes over
    the wire first (JSON text, read back as the server reads it: 5.0 is the integer 5)."""
    try:
        parse(json_text.loads(json.dumps(body), "the request body"))
    except InvalidRequest as exc:
        if not any(re.search(rule, exc.message) for rule in CROSS_FIELD.values()):
            return exc.message
    return None


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_a_body_the_document_allows_passes_the_routes_parsers(document, path):
    schema = schemathesis.openapi.from_dict(document)
    operation = schema[path]["POST"]
    parse = ROUTES[path]
    found: list[str] = []

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def draw(case):
        body = case.body
        if isinstance(body, dict) and body.get("previous_response_id") is not None:
            return          # the stored response it names decides (a 404 when unknown)
        message = _unstated(parse, body)
        if message is not None:
            found.append(message)
    draw()
    assert not found, f"{path}: the document allows bodies its parser refuses: {found[:5]}"
