"""Where a client marks a prefix for caching (``ChatRequest.cache_marks``): Anthropic's
``cache_control`` on system blocks, tools and message blocks, and the instructions before a
``prompt_cache_key``'s conversation. Pure wire parsing, no model."""
from __future__ import annotations

from hypnos.service.config.schema import LimitsConfig
from hypnos.service.wire.chat import instructions_mark, parse_chat
from hypnos.service.wire.messages import marked_chat_messages, to_chat_body
from hypnos.service.wire.responses import ResponsesBody
from hypnos.service.wire.responses_in import to_chat_body as responses_chat_body
from hypnos.service.wire.model import validate

MARK = {"type": "ephemeral"}


def marks(body: dict) -> tuple[int, ...]:
    wire, _chat = to_chat_body({"model": "m", "max_tokens": 5, **body})
    return marked_chat_messages(wire)[1]


def test_a_marked_system_block_or_tool_marks_the_system_message():
    ask = [{"role": "user", "content": "hi"}]
    assert marks({"system": [{"type": "text", "text": "rules", "cache_control": MARK}],
                  "messages": ask}) == (0,)
    assert marks({"system": "rules", "messages": ask, "tools": [
        {"name": "t", "input_schema": {"type": "object"}, "cache_control": MARK}]}) == (0,)
    assert marks({"system": "rules", "messages": ask}) == ()


def test_a_marked_message_block_marks_the_last_chat_message_it_became():
    body = {"system": "rules", "messages": [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "a.py"},
            {"type": "text", "text": "now open it", "cache_control": MARK}]}]}
    wire, _chat = to_chat_body({"model": "m", "max_tokens": 5, **body})
    messages, marked = marked_chat_messages(wire)
    # system, user, assistant, tool, user: the marked turn became the last two.
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert marked == (4,)


def test_a_prompt_cache_key_marks_the_instructions():
    messages = [{"role": "system", "content": "a"}, {"role": "developer", "content": "b"},
                {"role": "user", "content": "c"}]
    assert instructions_mark(messages) == (1,)
    assert instructions_mark([{"role": "user", "content": "c"}]) == ()
    body = {"model": "m", "messages": messages}
    assert parse_chat(body, LimitsConfig()).request.cache_marks == ()
    keyed = parse_chat({**body, "prompt_cache_key": "agent"}, LimitsConfig())
    assert keyed.request.cache_marks == (1,)


def test_a_responses_prompt_cache_key_marks_its_instructions():
    wire = validate(ResponsesBody, {"model": "m", "instructions": "be brief", "input": "hi",
                                    "prompt_cache_key": "agent"})
    chat, _new, _ignored = responses_chat_body(wire, [])
    assert parse_chat(chat, LimitsConfig()).request.cache_marks == (0,)
