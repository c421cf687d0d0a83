"""A Realtime session's conversation: its items in order, and for each assistant message
spoken, when each sentence began in its audio (what ``conversation.item.truncate`` keeps).
Pure: the session sends the events; errors are `InvalidRequest` with the protocol's codes."""
from __future__ import annotations

from hypnos.service.errors import InvalidRequest

Spoken = list[tuple[float, str]]        # (ms into the item's audio, sentence)


class Conversation:
    def __init__(self) -> None:
        self.items: list[dict] = []
        self.spoken: dict[str, Spoken] = {}     # assistant item id -> its sentences

    def last_id(self) -> str | None:
        return self.items[-1]["id"] if self.items else None

    def append(self, item: dict, spoken: Spoken | None = None) -> None:
        self.items.append(item)
        if spoken is not None:
            self.spoken[item["id"]] = list(spoken)

    def index(self, item_id: object) -> int:
        for i, item in enumerate(self.items):
            if item["id"] == item_id:
                return i
        raise InvalidRequest(f"No item with id '{item_id}' in the conversation",
                             param="item_id", code="item_not_found")

    def get(self, item_id: object) -> dict:
        return self.items[self.index(item_id)]

    def insert(self, item: dict, previous_item_id: object) -> str | None:
        """Puts ``item`` after ``previous_item_id`` (at the end when none; first for
        ``"root"``); returns the id of the item before it now."""
        if any(i["id"] == item["id"] for i in self.items):
            raise InvalidRequest(f"An item with id '{item['id']}' exists already",
                                 param="item.id", code="item_exists")
        at = len(self.items) if previous_item_id in (None, "") else (
            0 if previous_item_id == "root" else self.index(previous_item_id) + 1)
        self.items.insert(at, item)
        return self.items[at - 1]["id"] if at else None

    def delete(self, item_id: object) -> dict:
        item = self.items.pop(self.index(item_id))
        self.spoken.pop(item["id"], None)
        return item

    def truncate(self, item_id: object, audio_end_ms: object) -> tuple[dict, int]:
        """Keeps what an assistant message said before ``audio_end_ms`` of its audio (the
        sentences begun by then, as its transcript); returns the item and the end."""
        item = self.get(item_id)
        end = audio_end_ms
        if isinstance(end, bool) or not isinstance(end, int) or end < 0:
            raise InvalidRequest("'audio_end_ms' must be a non-negative integer",
                                 param="audio_end_ms")
        sentences = self.spoken.get(item["id"])
        if item.get("role") != "assistant" or sentences is None:
            raise InvalidRequest("Only an assistant message with audio can be truncated",
                                 param="item_id")
        self.spoken[item["id"]] = kept = [(s, t) for s, t in sentences if s < end]
        item["content"] = [{"type": "output_audio", "transcript": " ".join(t for _, t in kept)}]
        return item, end
