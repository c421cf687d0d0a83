"""What /v1/chat/completions and /v1/completions answer (`ChatCompletionCodec`,
`CompletionCodec`): the ``chat.completion`` / ``text_completion`` object, or its SSE chunks
ending in ``[DONE]``; n choices in order, usage with the prompt once, and a refusal after the
stream started as a chunk with finish_reason "error" and the error object (spec 7.4)."""
from __future__ import annotations

import json
import secrets
import time
from typing import Any

from hypnos.engines.records import ChatDelta, ChatResult, ToolCall
from hypnos.service import errors
from hypnos.service.wire.chat import ChatParams
from hypnos.service.wire.codec import (DONE, SSE_COMMENT_KEEPALIVE, SSE_HEADERS, TurnEnd,
                                       data_frame)


def usage(results: list[ChatResult], window: int | None = None) -> dict:
    """The prompt once, completion tokens summed over the choices, the KV use of the first
    choice (the session's slot) against the model's context ``window`` (Pantheon's kv_cap:
    the same number /v1/models advertises as context_window)."""
    first = results[0]
    completion = sum(r.completion_tokens for r in results)
    out = {"prompt_tokens": first.prompt_tokens, "completion_tokens": completion,
           "total_tokens": first.prompt_tokens + completion,
           "prompt_tokens_details": {"cached_tokens": first.cached_tokens}}
    if first.kv_cap:
        out["kv_used"], out["kv_cap"] = first.kv_used, window or first.kv_cap
    predicted = [r.speculative for r in results
                 if r.speculative and r.speculative["method"] == "prediction"]
    if predicted:       # OpenAI Predicted Outputs: every choice's drafted tokens
        accepted = sum(p["accepted"] for p in predicted)
        out["completion_tokens_details"] = {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": sum(p["drafted"] for p in predicted) - accepted}
    return out


def seeds_fields(seeds: tuple[int, ...]) -> dict:
    """The record of batched choices (n > 1): each choice's seed, and that the choices were
    decoded together (reproducible as this same request, `inference.text.choice_requests`)."""
    return {"choices_batched": True, "choice_seeds": list(seeds)} if seeds else {}


def stream_error(base: dict, empty_choice: dict, err: errors.HypnosError) -> list[str]:
    """A failure after the stream started (spec 7.4): a chunk with finish_reason "error"
    and the error object, then [DONE]. A context_over_budget keeps its type and its KV
    numbers (Pantheon); anything else is a server_error."""
    error: dict = {"message": err.message, "type": "server_error"}
    if isinstance(err, errors.ContextOverBudget):
        error.update(type=err.type, code=None, kv_used=err.kv_used, kv_cap=err.kv_cap)
    return [data_frame({**base, "choices": [{"index": 0, **empty_choice,
                                             "finish_reason": "error"}], "error": error}),
            DONE]


def _call_wire(call: ToolCall, index: int, with_index: bool = False) -> dict:
    out = {"id": f"call_{secrets.token_hex(6)}_{index}", "type": "function",
           "function": {"name": call.name, "arguments": call.arguments}}
    return {"index": index, **out} if with_index else out


def _message(r: ChatResult) -> dict:
    msg: dict = {"role": "assistant", "content": r.text}
    if r.reasoning:
        msg["reasoning_content"] = r.reasoning
    if r.tool_calls:
        msg["tool_calls"] = [_call_wire(c, i) for i, c in enumerate(r.tool_calls)]
    return msg


def _choice_extras(r: ChatResult) -> dict:
    out: dict[str, object] = {}
    if r.tool_call_errors:
        out["tool_call_error"] = r.tool_call_errors[0].to_wire()
    if r.tool_call_truncated:
        out["tool_call_truncated"] = True
    return out


def _logprobs(r: ChatResult) -> dict:
    return ({"logprobs": {"content": [lp.to_wire() for lp in r.logprobs]}}
            if r.logprobs is not None else {})


def _format_status(params: ChatParams, results: list[ChatResult]) -> str | None:
    """Pantheon's response_format_status; "not_enforced" when a constrained answer did not
    close a complete JSON value (cut by max_tokens or a stop string)."""
    status = params.response_format_status or results[0].response_format_status
    wanted = (params.request.response_format or {}).get("type")
    if status in ("applied", "schema_downgraded") and wanted in ("json_object", "json_schema"):
        for r in results:
            try:
                json.loads(r.text)
            except ValueError:
                return "not_enforced"
    return status


class ChatCompletionCodec:
    media_type = "text/event-stream"
    stream_headers = SSE_HEADERS
    keepalive: str | None = SSE_COMMENT_KEEPALIVE

    def __init__(self, params: ChatParams):
        self.params = params
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.base: dict = {}
        self.calls: dict[int, int] = {}         # choice -> tool calls streamed so far

    def _top_level(self, results: list[ChatResult]) -> dict:
        out = {}
        status = _format_status(self.params, results)
        if status:
            out["response_format_status"] = status
        if self.params.n_status:
            out["n_status"] = self.params.n_status
        return out

    def whole(self, end: TurnEnd) -> dict:
        return {
            "id": self.id, "object": "chat.completion", "created": self.created,
            "model": self.params.model,
            "choices": [{"index": i, "message": _message(r), "finish_reason": r.finish_reason,
                         **_logprobs(r), **_choice_extras(r)}
                        for i, r in enumerate(end.results)],
            "usage": usage(end.results, end.window), **self._top_level(end.results),
            **seeds_fields(end.seeds), "hypnos_telemetry": end.telemetry}

    def _chunk(self, index: int, delta: dict, finish: str | None = None, **extra: Any) -> str:
        return data_frame({**self.base, "choices": [
            {"index": index, "delta": delta, "finish_reason": finish, **extra}]})

    def head(self, seeds: tuple[int, ...]) -> list[str]:
        self.base = {"id": self.id, "object": "chat.completion.chunk",
                     "created": self.created, "model": self.params.model,
                     **seeds_fields(seeds)}
        return [self._chunk(i, {"role": "assistant", "content": ""})
                for i in range(max(len(seeds), 1))]

    def delta(self, index: int, d: ChatDelta) -> list[str]:
        extra: dict[str, Any] = ({"logprobs": {"content": [lp.to_wire() for lp in d.logprobs]}}
                                 if d.logprobs else {})
        if d.reasoning:
            return [self._chunk(index, {"reasoning_content": d.reasoning}, **extra)]
        if d.content:
            return [self._chunk(index, {"content": d.content}, **extra)]
        if d.tool_call is not None:
            n = self.calls.get(index, 0)
            self.calls[index] = n + 1
            return [self._chunk(index, {"tool_calls": [_call_wire(d.tool_call, n, True)]},
                                **extra)]
        return [self._chunk(index, {}, **extra)] if extra else []

    def tail(self, end: TurnEnd) -> list[str]:
        used = usage(end.results, end.window)
        last = {"usage": used, **self._top_level(end.results),
                "hypnos_telemetry": end.telemetry}
        out = [data_frame({**self.base, "choices": [{
            "index": i, "delta": {}, "finish_reason": r.finish_reason, **_choice_extras(r)}],
            **(last if i == len(end.results) - 1 else {})})
            for i, r in enumerate(end.results)]
        if self.params.include_usage:
            out.append(data_frame({**self.base, "choices": [], "usage": used}))
        return [*out, DONE]

    def refused(self, error: errors.HypnosError) -> list[str]:
        return stream_error(self.base, {"delta": {}}, error)


def _legacy_logprobs(r: ChatResult, offset: int) -> dict:
    tokens, offsets, at = [], [], offset
    for lp in r.logprobs or []:
        tokens.append(lp.token)
        offsets.append(at)
        at += len(lp.token)
    return {"tokens": tokens, "token_logprobs": [lp.logprob for lp in r.logprobs or []],
            "top_logprobs": [{t: v for t, _, v in lp.top} for lp in r.logprobs or []],
            "text_offset": offsets}


class CompletionCodec:
    """/v1/completions: ``echo`` puts the prompt before each choice's text."""
    media_type = "text/event-stream"
    stream_headers = SSE_HEADERS
    keepalive: str | None = SSE_COMMENT_KEEPALIVE

    def __init__(self, model: str, prompt: str, *, echo: bool, include_usage: bool,
                 n_status: str | None):
        self.prompt, self.echo, self.include_usage = prompt, echo, include_usage
        self.base: dict = {"id": "cmpl-" + secrets.token_hex(12), "object": "text_completion",
                           "created": int(time.time()), "model": model}
        if n_status:
            self.base["n_status"] = n_status

    def whole(self, end: TurnEnd) -> dict:
        head = self.prompt if self.echo else ""
        return {**self.base, **seeds_fields(end.seeds), "choices": [
            {"index": i, "text": head + r.text, "finish_reason": r.finish_reason,
             "logprobs": _legacy_logprobs(r, len(head)) if r.logprobs is not None else None}
            for i, r in enumerate(end.results)],
            "usage": usage(end.results, end.window), "hypnos_telemetry": end.telemetry}

    def _choice(self, index: int, text: str, finish: str | None = None, **extra) -> str:
        return data_frame({**self.base, "choices": [
            {"index": index, "text": text, "finish_reason": finish, "logprobs": None}],
            **extra})

    def head(self, seeds: tuple[int, ...]) -> list[str]:
        self.base.update(seeds_fields(seeds))
        if not self.echo:
            return []
        return [self._choice(i, self.prompt) for i in range(max(len(seeds), 1))]

    def delta(self, index: int, d: ChatDelta) -> list[str]:
        return [self._choice(index, d.content)] if d.content else []

    def tail(self, end: TurnEnd) -> list[str]:
        used = usage(end.results, end.window)
        last = {"usage": used, "hypnos_telemetry": end.telemetry}
        out = [self._choice(i, "", r.finish_reason, **(last if i == len(end.results) - 1
                                                      else {}))
               for i, r in enumerate(end.results)]
        if self.include_usage:
            out.append(data_frame({**self.base, "choices": [], "usage": used}))
        return [*out, DONE]

    def refused(self, error: errors.HypnosError) -> list[str]:
        return stream_error(self.base, {"text": ""}, error)
