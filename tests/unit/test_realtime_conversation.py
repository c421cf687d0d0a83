"""The Realtime session's conversation (issue 42), pure: where items go, what truncation
keeps, and the protocol's error codes."""
import pytest

from hypnos.service.errors import InvalidRequest
from hypnos.service.inference.realtime_conversation import Conversation


def msg(item_id, role="user"):
    return {"id": item_id, "type": "message", "role": role, "content": []}


def ids(conv):
    return [i["id"] for i in conv.items]


def test_items_go_at_the_end_first_or_after_the_one_named():
    conv = Conversation()
    assert conv.last_id() is None
    assert conv.insert(msg("a"), None) is None
    assert conv.insert(msg("b"), "") == "a"
    assert conv.insert(msg("c"), "root") is None
    assert conv.insert(msg("d"), "c") == "c"
    assert ids(conv) == ["c", "d", "a", "b"] and conv.last_id() == "b"
    with pytest.raises(InvalidRequest) as exists:
        conv.insert(msg("a"), None)
    with pytest.raises(InvalidRequest) as missing:
        conv.insert(msg("e"), "nope")
    assert (exists.value.code, missing.value.code) == ("item_exists", "item_not_found")
    assert ids(conv) == ["c", "d", "a", "b"]


def test_truncation_keeps_the_sentences_begun_before_the_end():
    conv = Conversation()
    conv.append(msg("u"))
    conv.append(msg("x", "assistant"), [(0.0, "One."), (900.0, "Two."), (1800.0, "Three.")])
    item, end = conv.truncate("x", 900)
    assert end == 900 and item["content"] == [{"type": "output_audio", "transcript": "One."}]
    assert conv.spoken["x"] == [(0.0, "One.")]
    for item_id, at, param in (("u", 10, "item_id"), ("x", -1, "audio_end_ms"),
                               ("x", True, "audio_end_ms"), ("x", 1.5, "audio_end_ms")):
        with pytest.raises(InvalidRequest) as bad:
            conv.truncate(item_id, at)
        assert bad.value.param == param
    with pytest.raises(InvalidRequest) as gone:
        conv.truncate("zz", 10)
    assert gone.value.code == "item_not_found"


def test_deleting_an_item_forgets_what_it_said():
    conv = Conversation()
    conv.append(msg("x", "assistant"), [(0.0, "One.")])
    assert conv.delete("x")["id"] == "x" and conv.items == [] and conv.spoken == {}
    with pytest.raises(InvalidRequest):
        conv.get("x")
