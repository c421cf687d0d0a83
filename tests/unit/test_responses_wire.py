"""The Responses dialect without a model: the body's translation into a chat body
(service/wire/responses.py), the output items and the stream's event sequence
(service/wire/responses_out.py), and the stored conversations' session plan
(service/inference/stored_responses.py; the store itself: test_stored_responses.py)."""
from __future__ import annotations

import asyncio
import json

import pytest

from hypnos.engines.records import ChatDelta, ChatResult, ToolCall
from hypnos.service.errors import InvalidRequest
from hypnos.service.inference.stored_responses import (SESSION_PREFIX, ResponseStore,
                                                       StoredResponse, is_conversation_key,
                                                       session_plan)
from hypnos.service.wire.chat import parse_chat
from hypnos.service.config.schema import LimitsConfig
from hypnos.service.wire.responses import parse_body
from hypnos.service.wire.responses_in import to_chat_body
from hypnos.service.wire.responses_items import input_item_objects, item_page, page_query
from hypnos.service.wire.responses_out import (EventStream, assistant_message, output_items,
                                               response_object, usage)

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def chat_of(body: dict, history: list[dict] | None = None):
    wire = parse_body({"model": "m", **body})
    chat, new, ignored = to_chat_body(wire, history or [])
    parse_chat(chat, LimitsConfig())            # the chat path takes what we built
    return chat, new, ignored


def test_a_string_input_with_instructions_is_system_then_user():
    chat, new, _ = chat_of({"input": "hi", "instructions": "Be brief.",
                            "max_output_tokens": 9, "temperature": 0.5})
    assert chat["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "hi"}]
    assert new == chat["messages"][1:]
    assert chat["max_tokens"] == 9 and chat["temperature"] == 0.5 and chat["stream"] is False


def test_items_become_chat_messages_and_assistant_pieces_merge():
    chat, _, _ = chat_of({"input": [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "hmm"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
    ]})
    msgs = chat["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert msgs[1]["content"][1] == {"type": "image_url",
                                     "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert msgs[2]["reasoning_content"] == "hmm"
    assert msgs[2]["tool_calls"][0]["id"] == "c1"
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert msgs[4]["content"] == "It is sunny."


def test_a_call_output_may_answer_a_call_of_the_stored_history():
    history = [{"role": "user", "content": "w?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_9", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"}}]}]
    chat, new, _ = chat_of({"input": [{"type": "function_call_output", "call_id": "call_9",
                                       "output": "rain"}], "tools": [WEATHER]}, history)
    assert chat["messages"][:2] == history and new[0]["tool_call_id"] == "call_9"


def test_non_function_tools_are_ignored_and_named():
    chat, _, ignored = chat_of({"input": "hi", "tools": [
        WEATHER, {"type": "web_search"}, {"type": "namespace", "name": "mcp", "tools": []},
        {"type": "custom", "name": "apply_patch"}], "tool_choice": "auto"})
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather"]
    assert ignored == ["web_search", "namespace", "custom"]
    only_hosted, _, ignored = chat_of({"input": "hi", "tools": [{"type": "web_search"}]})
    assert "tools" not in only_hosted and ignored == ["web_search"]


def test_tool_choice_maps_onto_the_chat_choices():
    named, _, _ = chat_of({"input": "hi", "tools": [WEATHER],
                           "tool_choice": {"type": "function", "name": "get_weather"}})
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    required, _, _ = chat_of({"input": "hi", "tools": [WEATHER], "tool_choice": "required"})
    assert required["tool_choice"] == "required"
    allowed, _, _ = chat_of({"input": "hi", "tools": [WEATHER, {**WEATHER, "name": "other"}],
                             "tool_choice": {"type": "allowed_tools", "mode": "required",
                                             "tools": [{"type": "function", "name": "other"}]}})
    assert [t["function"]["name"] for t in allowed["tools"]] == ["other"]
    assert allowed["tool_choice"] == "required"


def test_reasoning_effort_and_text_format():
    chat, _, _ = chat_of({"input": "hi", "reasoning": {"effort": "xhigh"},
                          "text": {"format": {"type": "json_schema", "name": "city",
                                              "schema": {"type": "object"}, "strict": True}}})
    assert chat["reasoning_effort"] == "high"
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "city", "schema": {"type": "object"}, "strict": True}}
    obj, _, _ = chat_of({"input": "hi", "text": {"format": {"type": "json_object"}}})
    assert obj["response_format"] == {"type": "json_object"}
    plain, _, _ = chat_of({"input": "hi", "text": {"format": {"type": "text"}}})
    assert "response_format" not in plain


@pytest.mark.parametrize("body, fragment", [
    ({}, "'input' is required"),
    ({"input": []}, "non-empty array"),
    ({"input": 3}, "'input' must be a string or a non-empty array"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "must be an input item"),
    ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]},
     "no earlier function_call"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input_file"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "image_url"),
    ({"input": "hi", "tools": [{"type": "web_search"}],
      "tool_choice": {"type": "web_search"}}, "'web_search' tool"),
    ({"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}},
     "not a function in 'tools'"),
    ({"input": "hi", "tool_choice": "required"}, "needs a function tool"),
    ({"input": "hi", "tools": [{"type": "function"}]}, "name' is required"),
    ({"input": "hi", "text": {"format": {"type": "json_schema"}}}, "schema' is required"),
    ({"input": "hi", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
])
def test_bad_bodies_are_400s_naming_the_field(body, fragment):
    with pytest.raises(InvalidRequest) as err:
        chat_of(body)
    assert fragment in err.value.message


def _result(**kw) -> ChatResult:
    base = dict(text="", finish_reason="stop", prompt_tokens=10, completion_tokens=3)
    return ChatResult(**{**base, **kw})


def test_output_items_and_the_assistant_message_agree():
    r = _result(reasoning="think", text="hello", finish_reason="tool_calls",
                tool_calls=[ToolCall("f", "{\"a\":1}"), ToolCall("g", "{}")])
    items = output_items(r, parallel=False)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    msg = assistant_message(items)
    assert msg["reasoning_content"] == "think" and msg["content"] == "hello"
    assert msg["tool_calls"] == [{"id": items[2]["call_id"], "type": "function",
                                  "function": {"name": "f", "arguments": "{\"a\":1}"}}]
    assert len(output_items(r, parallel=True)) == 4


def test_a_cut_answer_is_incomplete():
    wire = parse_body({"model": "m", "input": "hi", "max_output_tokens": 3})
    out = response_object("resp_1", wire, status="completed", output=[],
                          finish_reason="length")
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}


def _events(deltas: list[ChatDelta], parallel: bool = True) -> tuple[list[dict], list]:
    sent: list[str] = []

    async def send(chunk: str) -> None:
        sent.append(chunk)

    async def run():
        stream = EventStream(send, parallel)
        for d in deltas:
            await stream.feed(d)
        return await stream.finish()
    items = asyncio.run(run())
    return [json.loads(s.split("data: ", 1)[1]) for s in sent], items


def test_the_stream_opens_and_closes_each_item_in_order():
    events, items = _events([ChatDelta(reasoning="a"), ChatDelta(reasoning="b"),
                             ChatDelta(content="Hel"), ChatDelta(content="lo"),
                             ChatDelta(tool_call=ToolCall("f", "{}"))])
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.output_item.added", "response.reasoning_text.delta",
        "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    text_done = next(e for e in events if e["type"] == "response.output_text.done")
    assert text_done["text"] == "Hello" and text_done["output_index"] == 1
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert items[1]["content"][0]["text"] == "Hello"
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [i["id"] for i in items]


def test_a_silent_stream_still_has_one_message_and_single_call_mode_drops_the_rest():
    events, items = _events([])
    assert [i["type"] for i in items] == ["message"] and items[0]["content"][0]["text"] == ""
    _, items = _events([ChatDelta(tool_call=ToolCall("f", "{}")),
                        ChatDelta(tool_call=ToolCall("g", "{}"))], parallel=False)
    assert [i["name"] for i in items] == ["f"]


def _stored(rid: str, conversation: str | None = None) -> StoredResponse:
    return StoredResponse(rid, "", "m", conversation or rid, None,
                          [{"role": "user", "content": "x"}], {"id": rid})


def test_session_plan_keeps_one_slot_unbound():
    key = SESSION_PREFIX + "new"
    assert session_plan({}, 1, key, {}) == (False, [])        # one slot: never bound
    assert session_plan({}, 2, key, {}) == (True, [])
    assert session_plan({key: 5}, 2, key, {}) == (True, [])   # already bound
    old, older = SESSION_PREFIX + "old", SESSION_PREFIX + "older"
    bound = {old: 1, older: 1, "someone": 1}
    assert session_plan(bound, 4, key, {old: 5, older: 2}) == (True, [older])
    assert session_plan({"a": 1, "b": 1}, 3, key, {}) == (False, [])   # none of ours to free
    # An owner's conversation key (`wire.sessions.owned_session`) is one of ours too.
    owned = "0123456789abcdef:" + SESSION_PREFIX + "x"
    assert is_conversation_key(owned) and not is_conversation_key("alice:chat")
    assert session_plan({owned: 1, "s": 1}, 3, key, {}) == (True, [owned])


def test_a_codex_cli_shaped_request_translates():
    """The shape Codex CLI 0.171 sends (measured): function tools beside a namespace of
    functions and web_search, reasoning with a summary but no effort, include, store false,
    prompt_cache_key, client_metadata, developer and user messages of input_text parts."""
    fn = {"type": "function", "name": "exec_command", "description": "Run a command",
          "strict": False, "parameters": {"type": "object", "properties": {
              "cmd": {"type": "string"}}, "required": ["cmd"]}}
    chat, new, ignored = chat_of({
        "stream": True, "store": False, "tool_choice": "auto", "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1", "client_metadata": {"turn_id": "t1"},
        "tools": [fn, {"type": "namespace", "name": "multi_agent", "description": "agents",
                       "tools": [{**fn, "name": "spawn_agent"}]},
                  {"type": "web_search", "external_web_access": False}],
        "input": [{"type": "message", "role": "developer",
                   "content": [{"type": "input_text", "text": "You are a coding agent."}]},
                  {"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "<env>cwd</env>"},
                               {"type": "input_text", "text": "Say hello."}]}]})
    assert ignored == ["namespace", "web_search"]
    assert [t["function"]["name"] for t in chat["tools"]] == ["exec_command"]
    assert [m["role"] for m in chat["messages"]] == ["system", "user"]
    assert "reasoning_effort" not in chat and chat["stream"] is True
    assert new == chat["messages"]


def test_input_items_get_ids_and_parts_and_page_both_ways():
    items = input_item_objects(parse_body({"model": "m", "input": [
        {"role": "assistant", "content": "earlier"},
        {"type": "function_call", "id": "fc_mine", "call_id": "c1", "name": "f",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}))
    assert [i["id"][:3] for i in items] == ["msg", "fc_", "fco"] and items[1]["id"] == "fc_mine"
    assert items[0]["content"] == [{"type": "output_text", "text": "earlier"}]
    assert all(i["status"] == "completed" for i in items)
    (only,) = input_item_objects(parse_body({"model": "m", "input": "hi"}))
    assert only["role"] == "user" and only["content"][0]["type"] == "input_text"
    desc = item_page(items, 2, "desc", None)
    assert [i["type"] for i in desc["data"]] == ["function_call_output", "function_call"]
    assert desc["has_more"] and desc["last_id"] == "fc_mine"
    tail = item_page(items, 2, "desc", "fc_mine")
    assert [i["id"] for i in tail["data"]] == [items[0]["id"]] and not tail["has_more"]
    assert item_page([], 5, "asc", None) == {"object": "list", "data": [], "first_id": None,
                                             "last_id": None, "has_more": False}
    with pytest.raises(InvalidRequest, match="after"):
        item_page(items, 2, "asc", "nope")


@pytest.mark.parametrize("args, param", [({"limit": "0"}, "limit"), ({"limit": "x"}, "limit"),
                                         ({"order": "up"}, "order")])
def test_input_items_query_refuses_bad_values(args, param):
    with pytest.raises(InvalidRequest) as refused:
        page_query(args)
    assert refused.value.param == param
    assert page_query({}) == (20, "desc", None)


def test_the_store_bounds_are_config_keys_and_the_status_lists_the_newest(tmp_path):
    from hypnos.service.config.load import ConfigError, load_config
    path = tmp_path / "hypnos.toml"
    path.write_text("[server]\nstored_responses_max_count = 3\n"
                    "stored_responses_max_bytes = 4096\n")
    server = load_config(path, env={}).server
    assert (server.stored_responses_max_count, server.stored_responses_max_bytes) == (3, 4096)
    assert server.stored_responses_ttl_secs == 30 * 86400
    store = ResponseStore(None, server.stored_responses_max_count,
                          server.stored_responses_max_bytes)
    for rid in ("a", "b", "c", "d"):
        store.put(_stored(rid, conversation="conv"))
    snap = store.snapshot()
    assert [i["id"] for i in snap["newest"]] == ["d", "c", "b"] and snap["max_count"] == 3
    size = _stored("d").bytes
    assert snap["newest"][0] == {"id": "d", "model": "m", "conversation": "conv", "bytes": size,
                                 "stored_at": snap["newest"][0]["stored_at"]}
    path.write_text("[server]\nstored_responses_max_bytes = -1\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path, env={})
    assert "server.stored_responses_max_bytes: must be >= 0, got -1" in str(refused.value)


def test_the_reader_counts_the_tokens_inside_the_thinking_block():
    """usage.output_tokens_details.reasoning_tokens: the delimiters count, the answer not."""
    from hypnos.engines.chat_format.prepare import ThinkDialect
    from hypnos.engines.chat_format.stream import AnswerSplitter, StopMatcher
    from hypnos.engines.llama.reader import AnswerReader
    reader = AnswerReader(AnswerSplitter(think=ThinkDialect("<think>", "</think>")),
                          StopMatcher([]), None, logprobs=False)
    for piece in ("<think>", "\nsky", " is", " blue", "</think>", "\n\nBlue", "."):
        reader.token(piece, piece.encode(), None)
    reader.finish()
    assert (reader.reasoning, reader.content) == ("sky is blue", "Blue.")
    assert reader.reasoning_tokens == 5
    plain = AnswerReader(AnswerSplitter(), StopMatcher([]), None, logprobs=False)
    plain.token("hi", b"hi", None)
    assert plain.reasoning_tokens == 0
    r = ChatResult(text="Blue.", finish_reason="stop", prompt_tokens=9, completion_tokens=7,
                   reasoning="sky is blue", reasoning_tokens=5)
    assert usage(r)["output_tokens_details"] == {"reasoning_tokens": 5}
