"""What /v1/responses answers: the Response object (`response_object`), its output items from a
chat result (`output_items`), and the stream's event sequence (`EventStream`). The assistant's
turn goes back into the stored conversation as one chat message (`assistant_message`) built
from the same items, so a call's ``call_id`` is the one the next turn answers."""
from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence

from hypnos.engines.records import ChatDelta, ChatResult


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _message_item(text: str, status: str = "completed", item_id: str | None = None) -> dict:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"type": "message", "id": item_id or new_id("msg"), "status": status,
            "role": "assistant", "content": content if status == "completed" else []}


def _reasoning_item(text: str, item_id: str | None = None) -> dict:
    return {"type": "reasoning", "id": item_id or new_id("rs"), "summary": [],
            "content": [{"type": "reasoning_text", "text": text}]}


def _call_item(name: str, arguments: str, status: str = "completed") -> dict:
    return {"type": "function_call", "id": new_id("fc"), "call_id": new_id("call"),
            "name": name, "arguments": arguments if status == "completed" else "",
            "status": status}


def output_items(r: ChatResult, parallel: bool) -> list[dict]:
    """reasoning, then the message (when there is text, or nothing else), then the calls
    (only the first unless ``parallel``)."""
    out: list[dict] = []
    if r.reasoning:
        out.append(_reasoning_item(r.reasoning))
    if r.text or not r.tool_calls:
        out.append(_message_item(r.text))
    calls = r.tool_calls if parallel else r.tool_calls[:1]
    out.extend(_call_item(c.name, c.arguments) for c in calls)
    return out


def assistant_message(items: list[dict]) -> dict:
    """The output items as the one chat message the stored conversation continues from."""
    msg: dict = {"role": "assistant", "content": ""}
    for item in items:
        if item["type"] == "reasoning":
            msg["reasoning_content"] = item["content"][0]["text"]
        elif item["type"] == "message":
            msg["content"] += "".join(p["text"] for p in item["content"])
        else:
            msg.setdefault("tool_calls", []).append({
                "id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]}})
    return msg


def usage(r: ChatResult) -> dict:
    """OpenAI counts the cached prefix inside input_tokens, and the thinking tokens inside
    output_tokens."""
    return {"input_tokens": r.prompt_tokens,
            "input_tokens_details": {"cached_tokens": r.cached_tokens},
            "output_tokens": r.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": r.reasoning_tokens},
            "total_tokens": r.prompt_tokens + r.completion_tokens}


def response_object(rid: str, wire, *, status: str, output: list[dict],
                    usage_: dict | None = None, finish_reason: str | None = None,
                    ignored: Sequence[str] = (), created: int | None = None) -> dict:
    """The Response object; ``wire`` is the validated request (`ResponsesBody`)."""
    incomplete = {"reason": "max_output_tokens"} if finish_reason == "length" else None
    fmt = wire.text.format.model_dump(by_alias=True, exclude_none=True) \
        if wire.text is not None and wire.text.format is not None else {"type": "text"}
    choice = wire.tool_choice
    if choice is not None and not isinstance(choice, str):
        choice = choice.model_dump(exclude_none=True)
    out = {
        "id": rid, "object": "response", "created_at": created or int(time.time()),
        "status": "incomplete" if incomplete and status == "completed" else status,
        "error": None, "incomplete_details": incomplete,
        "instructions": wire.instructions, "max_output_tokens": wire.max_output_tokens,
        "model": wire.model, "output": output,
        "parallel_tool_calls": wire.parallel_tool_calls is not False,
        "previous_response_id": wire.previous_response_id,
        "reasoning": {"effort": wire.reasoning.effort if wire.reasoning else None,
                      "summary": None},
        "store": wire.store is not False, "temperature": wire.temperature,
        "text": {"format": fmt},
        "tool_choice": choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in wire.tools or ()],
        "top_p": wire.top_p, "truncation": "disabled", "usage": usage_,
        "user": wire.user, "metadata": dict(wire.metadata or {}),
    }
    if ignored:
        out["hypnos_ignored_tools"] = list(ignored)
    return out


def sse(name: str, payload: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


class EventStream:
    """The Responses event sequence over SSE, every event with its ``sequence_number``. An
    item opens when the kind of delta changes (reasoning, message text, one per tool call)
    and is done before the next one opens; ``items`` are the finished output items."""

    def __init__(self, send: Callable[[str], Awaitable[None]], parallel: bool):
        self.send = send
        self.parallel = parallel
        self.seq = 0
        self.items: list[dict] = []
        self.current: dict | None = None        # the open item
        self.calls = 0

    async def emit(self, kind: str, **payload) -> None:
        await self.send(sse(kind, {"type": kind, "sequence_number": self.seq, **payload}))
        self.seq += 1

    async def lifecycle(self, kind: str, response: dict) -> None:
        await self.emit(kind, response=response)

    @property
    def index(self) -> int:
        return len(self.items)

    async def _open(self, item: dict) -> None:
        await self.close()
        self.current = item
        await self.emit("response.output_item.added", output_index=self.index, item=item)

    async def _open_message(self) -> dict:
        item = _message_item("", status="in_progress")
        await self._open(item)
        item["_text"] = ""
        await self.emit("response.content_part.added", item_id=item["id"],
                        output_index=self.index, content_index=0,
                        part={"type": "output_text", "text": "", "annotations": []})
        return item

    async def close(self) -> None:
        """Finish the open item: its .done events, then output_item.done."""
        item, self.current = self.current, None
        if item is None:
            return
        at = {"item_id": item["id"], "output_index": self.index}
        if item["type"] == "message":
            text = item.pop("_text")
            done = _message_item(text, item_id=item["id"])
            await self.emit("response.output_text.done", **at, content_index=0, text=text,
                            logprobs=[])
            await self.emit("response.content_part.done", **at, content_index=0,
                            part=done["content"][0])
        else:
            text = item.pop("_text")
            done = _reasoning_item(text, item_id=item["id"])
            await self.emit("response.reasoning_text.done", **at, content_index=0, text=text)
        await self.emit("response.output_item.done", output_index=self.index, item=done)
        self.items.append(done)

    async def feed(self, d: ChatDelta) -> None:
        cur = self.current
        if d.reasoning:
            if cur is None or cur["type"] != "reasoning":
                cur = {"type": "reasoning", "id": new_id("rs"), "summary": []}
                await self._open(cur)
                cur["_text"] = ""
            cur["_text"] += d.reasoning
            await self.emit("response.reasoning_text.delta", item_id=cur["id"],
                            output_index=self.index, content_index=0, delta=d.reasoning)
        elif d.content:
            if cur is None or cur["type"] != "message":
                cur = await self._open_message()
            cur["_text"] += d.content
            await self.emit("response.output_text.delta", item_id=cur["id"],
                            output_index=self.index, content_index=0, delta=d.content,
                            logprobs=[])
        elif d.tool_call is not None and (self.parallel or not self.calls):
            await self._call(d.tool_call.name, d.tool_call.arguments)

    async def _call(self, name: str, arguments: str) -> None:
        """A whole call: added, its arguments in one delta, done."""
        self.calls += 1
        await self.close()
        item = _call_item(name, arguments, status="in_progress")
        await self.emit("response.output_item.added", output_index=self.index, item=item)
        at = {"item_id": item["id"], "output_index": self.index}
        await self.emit("response.function_call_arguments.delta", **at, delta=arguments)
        await self.emit("response.function_call_arguments.done", **at, name=name,
                        arguments=arguments)
        done = {**item, "arguments": arguments, "status": "completed"}
        await self.emit("response.output_item.done", output_index=self.index, item=done)
        self.items.append(done)

    async def finish(self) -> list[dict]:
        """Close the open item; an empty message when nothing was said. The output items."""
        if not self.items and self.current is None:
            await self._open_message()
        await self.close()
        return self.items
