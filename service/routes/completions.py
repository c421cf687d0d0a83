"""POST /v1/completions: the legacy single-string completion (Fermion), streaming too.

The prompt goes to the model as it is (no chat template). Shares sampling, stop strings,
``n``, the 422 and the engine path with chat; ``logprobs`` is the legacy integer (0..5) and
answers in the legacy shape (tokens / token_logprobs / top_logprobs / text_offset).
"""
from __future__ import annotations

import secrets
import time
from typing import Annotated

from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines.records import ChatDelta, ChatRequest, ChatResult
from hypnos.planner.context import request_context, tokens_from_chars
from hypnos.service import errors
from hypnos.service.http.caller import caller_of
from hypnos.service.wire.chat import Sampling, parse_n, parse_sampling, parse_stream
from hypnos.service.wire.model import Says, validate
from hypnos.service.wire.body import json_body
from hypnos.service.inference.leased import LeasedCall
from hypnos.service.inference.text import (check_text_model, choice_requests, choice_seeds,
                                           record, run_choices, stream_choices, text_lease,
                                           text_telemetry, usage)
from hypnos.service.http.sse import send_stream_error, sse
from hypnos.service.http.openapi import endpoint, ANY_OBJECT, needs_ready
from hypnos.service.state import state_of
from hypnos.service.config.schema import LimitsConfig

bp = Blueprint("completions")
MAX_LEGACY_LOGPROBS = 5


NON_EMPTY = Annotated[str, Field(min_length=1)]


class CompletionsBody(Sampling):
    """``logprobs`` is the legacy integer: how many alternatives per token (0..5)."""
    model: Annotated[str, Field(min_length=1), Says("'model' is required and must be a string")]
    prompt: Annotated[NON_EMPTY | Annotated[list[NON_EMPTY], Field(min_length=1, max_length=1)],
                      Says("'prompt' must be a non-empty string (or an array of one)")]
    echo: Annotated[bool, Says("'echo' must be a boolean")] | None = None
    logprobs: Annotated[int, Field(ge=0, le=MAX_LEGACY_LOGPROBS)] | None = None


def _prompt(wire: CompletionsBody, limits: LimitsConfig) -> str:
    prompt = wire.prompt if isinstance(wire.prompt, str) else wire.prompt[0]
    if len(prompt) > limits.max_prompt_chars:
        raise errors.InvalidRequest(f"'prompt' holds {len(prompt)} characters, above "
                                    f"max_prompt_chars ({limits.max_prompt_chars})",
                                    param="prompt")
    return prompt


def _legacy_logprobs(r: ChatResult, offset: int) -> dict:
    tokens, offsets, at = [], [], offset
    for lp in r.logprobs or []:
        tokens.append(lp.token)
        offsets.append(at)
        at += len(lp.token)
    return {"tokens": tokens, "token_logprobs": [lp.logprob for lp in r.logprobs or []],
            "top_logprobs": [{t: v for t, _, v in lp.top} for lp in r.logprobs or []],
            "text_offset": offsets}


@bp.post("/v1/completions")
@needs_ready
@endpoint("Text completion (OpenAI legacy); SSE when stream is true",
          body=CompletionsBody, errors=(404, 422, 429, 500, 503, 507),
          ok={"application/json": ANY_OBJECT, "text/event-stream": {"type": "string"}})
async def completions(request: Request) -> HTTPResponse | None:
    wire = validate(CompletionsBody, json_body(request))
    limits = state_of(request).config.limits
    model = wire.model
    prompt = _prompt(wire, limits)
    stream, include_usage = parse_stream(wire)
    echo = bool(wire.echo)
    top = wire.logprobs
    n, n_status = parse_n(wire)
    req = ChatRequest(messages=[], prompt=prompt, logprobs=top is not None, top_logprobs=top or 0,
                      **parse_sampling(wire, limits, default_max_tokens=16))
    st = check_text_model(state_of(request).scheduler, model)
    window = state_of(request).scheduler.context_window(st)
    estimate = request_context(tokens_from_chars(len(prompt)), req.max_tokens)
    async with text_lease(caller_of(request), model, min(estimate, window)) as call:
        reqs = choice_requests(req, n)
        base = {"id": "cmpl-" + secrets.token_hex(12), "object": "text_completion",
                "created": int(time.time()), "model": model}
        if n_status:
            base["n_status"] = n_status
        base.update(choice_seeds(reqs))
        if stream:
            return await _stream(request, call, reqs, base, echo, include_usage, window)
        results = await run_choices(call, reqs)
        record(caller_of(request), call, results)
        head = prompt if echo else ""
        out = {**base, "choices": [
            {"index": i, "text": head + r.text, "finish_reason": r.finish_reason,
             "logprobs": _legacy_logprobs(r, len(head)) if r.logprobs is not None else None}
            for i, r in enumerate(results)],
            "usage": usage(results, window),
            "hypnos_telemetry": text_telemetry(call, results)}
        return json_response(out, headers=call.wait_headers())


async def _stream(request: Request, call: LeasedCall, reqs: list[ChatRequest], base: dict,
                  echo: bool, include_usage: bool, window: int) -> HTTPResponse | None:
    response = await request.respond(content_type="text/event-stream",
                                     headers={"cache-control": "no-cache",
                                              **call.wait_headers()})
    choice = lambda i, text, finish=None, **extra: sse(  # noqa: E731
        {**base, "choices": [{"index": i, "text": text, "finish_reason": finish,
                              "logprobs": None, **extra}]})
    if echo:
        for i in range(len(reqs)):
            await response.send(choice(i, reqs[i].prompt))

    async def send_delta(index: int, d: ChatDelta) -> None:
        if d.content:
            await response.send(choice(index, d.content))

    try:
        results = await stream_choices(call, reqs, send_delta,
                                       lambda: response.send(": keep-alive\n\n"))
    except errors.HypnosError as exc:
        await send_stream_error(response, base, {"text": ""}, exc)
        return None     # the response went out through request.respond()
    record(caller_of(request), call, results)
    tele = text_telemetry(call, results)
    used = usage(results, window)
    for i, r in enumerate(results):
        last = i == len(results) - 1
        extra = {"usage": used, "hypnos_telemetry": tele} if last else {}
        await response.send(sse({**base, "choices": [{"index": i, "text": "", "logprobs": None,
                                                      "finish_reason": r.finish_reason}],
                                 **extra}))
    if include_usage:
        await response.send(sse({**base, "choices": [], "usage": used}))
    await response.send("data: [DONE]\n\n")
    await response.eof()
    return None
