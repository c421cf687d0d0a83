"""What /v1/responses answers: the Response object (`response_object`), its output items from a
chat result (`output_items`), and the stream's event sequence (`ResponseEvents`), together
the dialect's codec (`ResponsesCodec`). The assistant's
turn goes back into the stored conversation as one chat message (`assistant_message`) built
from the same items, so a call's ``call_id`` is the one the next turn answers."""
from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Sequence

from hypnos.engines.records import ChatDelta, ChatResult
from hypnos.service.errors import HypnosError
from hypnos.service.wire.codec import (SSE_COMMENT_KEEPALIVE, SSE_HEADERS, TurnEnd,
                                       event_frame)


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


class ResponseEvents:
    """The Responses event sequence, every event with its ``sequence_number``, as frames
    (pure: each method returns the frames it adds). An item opens when the kind of delta
    changes (reasoning, message text, one per tool call) and is done before the next one
    opens; ``items`` are the finished output items."""

    def __init__(self, parallel: bool):
        self.parallel = parallel
        self.seq = 0
        self.items: list[dict] = []
        self.current: dict | None = None        # the open item
        self.calls = 0

    def emit(self, kind: str, **payload) -> str:
        frame = event_frame(kind, {"type": kind, "sequence_number": self.seq, **payload})
        self.seq += 1
        return frame

    def lifecycle(self, kind: str, response: dict) -> list[str]:
        return [self.emit(kind, response=response)]

    @property
    def index(self) -> int:
        return len(self.items)

    def _open(self, item: dict) -> list[str]:
        out = self.close()
        self.current = item
        return [*out, self.emit("response.output_item.added", output_index=self.index,
                                item=item)]

    def _open_message(self) -> list[str]:
        item = _message_item("", status="in_progress")
        out = self._open(item)
        item["_text"] = ""
        return [*out, self.emit("response.content_part.added", item_id=item["id"],
                                output_index=self.index, content_index=0,
                                part={"type": "output_text", "text": "", "annotations": []})]

    def close(self) -> list[str]:
        """Finish the open item: its .done events, then output_item.done."""
        item, self.current = self.current, None
        if item is None:
            return []
        at = {"item_id": item["id"], "output_index": self.index}
        text = item.pop("_text")
        if item["type"] == "message":
            done = _message_item(text, item_id=item["id"])
            out = [self.emit("response.output_text.done", **at, content_index=0, text=text,
                             logprobs=[]),
                   self.emit("response.content_part.done", **at, content_index=0,
                             part=done["content"][0])]
        else:
            done = _reasoning_item(text, item_id=item["id"])
            out = [self.emit("response.reasoning_text.done", **at, content_index=0,
                             text=text)]
        out.append(self.emit("response.output_item.done", output_index=self.index, item=done))
        self.items.append(done)
        return out

    def feed(self, d: ChatDelta) -> list[str]:
        cur = self.current
        out: list[str] = []
        if d.reasoning:
            if cur is None or cur["type"] != "reasoning":
                cur = {"type": "reasoning", "id": new_id("rs"), "summary": []}
                out += self._open(cur)
                cur["_text"] = ""
            cur["_text"] += d.reasoning
            out.append(self.emit("response.reasoning_text.delta", item_id=cur["id"],
                                 output_index=self.index, content_index=0, delta=d.reasoning))
        elif d.content:
            if cur is None or cur["type"] != "message":
                out += self._open_message()
                cur = self.current
                assert cur is not None
            cur["_text"] += d.content
            out.append(self.emit("response.output_text.delta", item_id=cur["id"],
                                 output_index=self.index, content_index=0, delta=d.content,
                                 logprobs=[]))
        elif d.tool_call is not None and (self.parallel or not self.calls):
            out += self._call(d.tool_call.name, d.tool_call.arguments)
        return out

    def _call(self, name: str, arguments: str) -> list[str]:
        """A whole call: added, its arguments in one delta, done."""
        self.calls += 1
        out = self.close()
        item = _call_item(name, arguments, status="in_progress")
        out.append(self.emit("response.output_item.added", output_index=self.index,
                             item=item))
        at = {"item_id": item["id"], "output_index": self.index}
        done = {**item, "arguments": arguments, "status": "completed"}
        out += [self.emit("response.function_call_arguments.delta", **at, delta=arguments),
                self.emit("response.function_call_arguments.done", **at, name=name,
                          arguments=arguments),
                self.emit("response.output_item.done", output_index=self.index, item=done)]
        self.items.append(done)
        return out

    def finish(self) -> list[str]:
        """Close the open item; an empty message when nothing was said."""
        out = self._open_message() if not self.items and self.current is None else []
        return [*out, *self.close()]


class EventStream:
    """`ResponseEvents` sent as they come: ``send`` awaits each frame."""

    def __init__(self, send: Callable[[str], Awaitable[None]], parallel: bool):
        self.send = send
        self.events = ResponseEvents(parallel)

    async def _out(self, frames: list[str]) -> None:
        for frame in frames:
            await self.send(frame)

    async def feed(self, d: ChatDelta) -> None:
        await self._out(self.events.feed(d))

    async def finish(self) -> list[dict]:
        """Close the open item; an empty message when nothing was said. The output items."""
        await self._out(self.events.finish())
        return self.events.items


class ResponsesCodec:
    """/v1/responses as a codec: the Response object, or created / in_progress, the items'
    events, then completed (incomplete when cut by max_output_tokens), or failed when the
    turn is refused after the stream started. ``render(status, output, result)`` builds the
    Response object (the route's: it knows the request); ``keep(response, items)`` stores
    the finished turn before it is sent and may mark it unstored."""
    media_type = "text/event-stream"
    stream_headers = SSE_HEADERS
    keepalive: str | None = SSE_COMMENT_KEEPALIVE

    def __init__(self, render: Callable[..., dict], parallel: bool,
                 keep: Callable[[dict, list[dict]], None]):
        self.render, self.parallel, self.keep = render, parallel, keep
        self.events = ResponseEvents(parallel)

    def _final(self, end: TurnEnd, items: list[dict]) -> dict:
        out = self.render("completed", items, end.first)
        out["hypnos_telemetry"] = end.telemetry
        self.keep(out, items)
        return out

    def whole(self, end: TurnEnd) -> dict:
        return self._final(end, output_items(end.first, self.parallel))

    def head(self, seeds: tuple[int, ...]) -> list[str]:
        start = self.render("in_progress", [])
        return [*self.events.lifecycle("response.created", start),
                *self.events.lifecycle("response.in_progress", start)]

    def delta(self, index: int, d: ChatDelta) -> list[str]:
        return self.events.feed(d)

    def tail(self, end: TurnEnd) -> list[str]:
        out = self.events.finish()
        final = self._final(end, self.events.items)
        kind = "response.incomplete" if final["status"] == "incomplete" else \
            "response.completed"
        return [*out, *self.events.lifecycle(kind, final)]

    def refused(self, error: HypnosError) -> list[str]:
        failed = self.render("failed", self.events.items)
        failed["error"] = {"code": error.type, "message": error.message}
        return self.events.lifecycle("response.failed", failed)
