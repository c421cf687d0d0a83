"""The dialects' translations into the chat body, model-free: Anthropic Messages
(service/wire/messages.py) and Ollama (service/wire/ollama.py)."""
import json
import math

import pytest

from hypnos.service.errors import InvalidRequest
from hypnos.service.wire.messages import to_chat_body
from hypnos.service.wire.ollama import KEEP_LOADED, chat_body, keep_alive_secs


# Ollama reads keep_alive as seconds or a Go duration; any negative value keeps the model
# loaded (KEEP_LOADED). Issue #35: NaN, infinities, 1e308 and "999999999h" were accepted and
# broke /api/ps; "-5m" was ignored instead of keeping the model loaded.
@pytest.mark.parametrize("value, secs", [
    (None, None), (0, 0.0), ("0", 0.0), (0.0, 0.0), ("-0s", 0.0), ("5m", 300.0),
    ("30s", 30.0), ("1h", 3600.0), ("250ms", 0.25), ("1h30m", 5400.0), ("1.5h", 5400.0),
    ("2h45m30s", 9930.0), (" 10m ", 600.0), ("+5m", 300.0), ("300", 300.0), (300, 300.0),
    (90, 90.0), (2.5, 2.5), ("8760h", 365 * 86400.0),
    (-1, KEEP_LOADED), (-1.5, KEEP_LOADED), ("-1", KEEP_LOADED), ("-1m", KEEP_LOADED),
    ("-5m", KEEP_LOADED), (-1e308, KEEP_LOADED)])
def test_keep_alive_durations(value, secs):
    assert keep_alive_secs(value) == secs


@pytest.mark.parametrize("value", [
    "soon", "5 minutes", "m5", "5d", "", "-", "1h30", "5m-", "1e3s", "NaN", "inf",
    math.nan, math.inf, -math.inf, 1e308, "999999999h", "8761h", 365 * 86400 + 1,
    "9" * 400 + "s", True, [5], {"m": 5}])
def test_keep_alive_refuses_what_it_cannot_honour(value):
    with pytest.raises(InvalidRequest) as err:
        keep_alive_secs(value)
    assert err.value.param == "keep_alive" and "keep_alive" in err.value.message


def test_ollama_options_format_and_tool_history():
    _wire, chat = chat_body({
        "model": "m", "format": {"type": "object", "properties": {"a": {"type": "string"}}},
        "options": {"num_predict": 7, "num_ctx": 2048, "repeat_penalty": 1.1, "stop": ["x"]},
        "messages": [{"role": "user", "content": "hi", "images": ["QUJD"]},
                     {"role": "assistant", "content": "", "tool_calls": [
                         {"function": {"name": "f", "arguments": {"a": 1}}}]},
                     {"role": "tool", "content": "done"}]})
    assert chat["max_tokens"] == 7 and chat["num_ctx"] == 2048 and chat["stop"] == ["x"]
    assert chat["repetition_penalty"] == 1.1
    assert chat["response_format"]["json_schema"]["schema"]["properties"] == {
        "a": {"type": "string"}}
    user, assistant, tool = chat["messages"]
    assert user["content"][1]["image_url"]["url"] == "data:image/png;base64,QUJD"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"a": 1}
    assert tool == {"role": "tool", "content": "done"}


def test_messages_blocks_become_chat_messages():
    _wire, chat = to_chat_body({
        "model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
        "tool_choice": {"type": "tool", "name": "get"}, "stop_sequences": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 64},
        "tools": [{"name": "get", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "use the tool"},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"c": "x"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain",
                 "is_error": True},
                {"type": "text", "text": "and now?"}]}]})
    system, first, assistant, result, follow = chat["messages"]
    assert system == {"role": "system", "content": "Be brief."}
    assert assistant["reasoning_content"] == "use the tool"
    assert assistant["tool_calls"][0]["id"] == "toolu_1"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"c": "x"}
    assert result == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: rain"}
    assert follow["content"] == [{"type": "text", "text": "and now?"}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get"}}
    assert chat["stop"] == ["END"] and chat["max_tokens"] == 9
    assert chat["think"] is True and chat["reasoning_budget"] == 64


@pytest.mark.parametrize("choice, expected", [
    ({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none")])
def test_messages_tool_choice(choice, expected):
    _wire, chat = to_chat_body({"model": "m", "max_tokens": 1, "tool_choice": choice,
                                "tools": [{"name": "t"}], "messages": [
                                    {"role": "user", "content": "x"}]})
    assert chat["tool_choice"] == expected


def test_messages_refuses_a_result_for_no_call_and_a_missing_max_tokens():
    with pytest.raises(InvalidRequest, match="tool_use_id"):
        to_chat_body({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}]}]})
    with pytest.raises(InvalidRequest, match="max_tokens"):
        to_chat_body({"model": "m", "messages": [{"role": "user", "content": "x"}]})


# ---------------------------------------------------------------- idle times and aliases

from hypnos.planner.types import Tier  # noqa: E402
from hypnos.service.scheduling.keep_alive import idle_target  # noqa: E402


@pytest.mark.parametrize("tier, idle, demote, evict, target", [
    (Tier.GPU, 10, 5, 0, Tier.RAM), (Tier.GPU, 4, 5, 0, None), (Tier.RAM, 10, 5, 0, None),
    (Tier.GPU, 30, 5, 20, Tier.SSD), (Tier.RAM, 30, 5, 20, Tier.SSD),
    (Tier.SSD, 30, 5, 20, None), (Tier.GPU, 100, 0, 0, None), (Tier.RAM, 19, 0, 20, None)])
def test_idle_target(tier, idle, demote, evict, target):
    assert idle_target(tier, idle, demote, evict) is target


def test_aliases_are_checked_and_resolved():
    import tomllib

    from hypnos.service.config.load import ConfigError, parse_config
    block = ('[[models]]\nid = "{id}"\nmodality = "embeddings"\nengine = "onnx_runtime"\n'
             'weights_path = "x.onnx"\naliases = {aliases}\n')
    good = block.format(id="a", aliases='["gpt-5"]') + block.format(id="b", aliases="[]")
    cfg = parse_config(tomllib.loads(good))
    assert cfg.models[0].aliases == ["gpt-5"]
    bad = block.format(id="a", aliases='["b"]') + block.format(id="b", aliases='["b2", ""]')
    with pytest.raises(ConfigError) as err:
        parse_config(tomllib.loads(bad))
    text = str(err.value)
    assert "models[0].aliases[0]" in text and "models[1].aliases[1]" in text
