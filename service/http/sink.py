"""A chat turn's answer over HTTP (`inference.turn.FrameSink` on a Sanic request): a stream
goes out through ``request.respond`` frame by frame; a whole answer is kept as the JSON
response the handler returns (``response``), so the response layers see it as any other.
`http_turn` is a route's one call: the turn, answering the request."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from sanic import HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.service.inference.leased import LeasedCall
from hypnos.service.http.caller import caller_of
from hypnos.service.inference.turn import FrameSink, RequestFor, chat_turn
from hypnos.service.wire.codec import ChatCodec


class ResponseSink(FrameSink):
    def __init__(self, request: Request):
        self.request = request
        self.stream: HTTPResponse | None = None     # an open stream
        self.response: HTTPResponse | None = None   # the whole answer, for the handler

    async def open(self, media_type: str, headers: dict[str, str]) -> None:
        self.stream = await self.request.respond(content_type=media_type, headers=headers)

    async def send(self, frame: str) -> None:
        assert self.stream is not None, "send before open"
        await self.stream.send(frame)

    async def close(self) -> None:
        assert self.stream is not None, "close before open"
        await self.stream.eof()

    async def whole(self, body: dict, headers: dict[str, str]) -> None:
        self.response = json_response(body, headers=headers)


async def http_turn(request: Request, lease: AbstractAsyncContextManager[LeasedCall],
                    chat: RequestFor, codec: ChatCodec, *, stream: bool, n: int = 1,
                    after: Sequence[Callable[[], None]] = ()) -> HTTPResponse | None:
    """`chat_turn` answering ``request``: the whole answer to return, or None once the
    stream went out through ``request.respond``."""
    sink = ResponseSink(request)
    await chat_turn(caller_of(request), lease, chat, codec, sink, stream=stream, n=n,
                    after=after)
    return sink.response
