"""POST /v1/completions (Fermion's legacy single-string completion): the body (`CompletionsBody`)
and `parse_completion`, which validates it into the engine request. The prompt goes to the
model as it is (no chat template); sampling, stop strings and ``n`` are chat's; ``logprobs``
is the legacy integer (0..5)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from hypnos.engines.records import ChatRequest
from hypnos.service.config.schema import LimitsConfig
from hypnos.service import errors
from hypnos.service.wire.chat import Sampling, parse_n, parse_sampling, parse_stream
from hypnos.service.wire.model import Says, validate

MAX_LEGACY_LOGPROBS = 5
NON_EMPTY = Annotated[str, Field(min_length=1)]


class CompletionsBody(Sampling):
    """``logprobs`` is the legacy integer: how many alternatives per token (0..5)."""
    model: Annotated[str, Field(min_length=1), Says("'model' is required and must be a string")]
    prompt: Annotated[NON_EMPTY | Annotated[list[NON_EMPTY], Field(min_length=1, max_length=1)],
                      Says("'prompt' must be a non-empty string (or an array of one)")]
    echo: Annotated[bool, Says("'echo' must be a boolean")] | None = None
    logprobs: Annotated[int, Field(ge=0, le=MAX_LEGACY_LOGPROBS)] | None = None


@dataclass
class Completion:
    model: str
    prompt: str
    request: ChatRequest
    stream: bool
    include_usage: bool
    echo: bool
    n: int
    n_status: str | None


def parse_completion(body: dict, limits: LimitsConfig) -> Completion:
    wire = validate(CompletionsBody, body)
    prompt = wire.prompt if isinstance(wire.prompt, str) else wire.prompt[0]
    if len(prompt) > limits.max_prompt_chars:
        raise errors.InvalidRequest(f"'prompt' holds {len(prompt)} characters, above "
                                    f"max_prompt_chars ({limits.max_prompt_chars})",
                                    param="prompt")
    stream, include_usage = parse_stream(wire)
    n, n_status = parse_n(wire)
    top = wire.logprobs
    req = ChatRequest(messages=[], prompt=prompt, logprobs=top is not None, top_logprobs=top or 0,
                      **parse_sampling(wire, limits, default_max_tokens=16))
    return Completion(wire.model, prompt, req, stream, include_usage, bool(wire.echo), n,
                      n_status)
