"""Server-sent events for the streamed routes: one event, and the error that ends a stream
already started (spec 7.4)."""
from __future__ import annotations

import json

from hypnos.service import errors


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def send_stream_error(response, base: dict, empty_choice: dict,
                            err: errors.HypnosError) -> None:
    """A failure after the stream started (spec 7.4): a chunk with finish_reason "error"
    and the error object, then [DONE]. A context_over_budget keeps its type and its KV
    numbers (Pantheon); anything else is a server_error."""
    error = {"message": err.message, "type": "server_error"}
    if isinstance(err, errors.ContextOverBudget):
        error.update(type=err.type, code=None, kv_used=err.kv_used, kv_cap=err.kv_cap)
    await response.send(sse({**base, "choices": [{"index": 0, **empty_choice,
                                                  "finish_reason": "error"}],
                             "error": error}))
    await response.send("data: [DONE]\n\n")
    await response.eof()
