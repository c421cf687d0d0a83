"""Ollama's API (Open WebUI, Continue, editor plugins, LangChain's ChatOllama) on the pool:
/api/chat and /api/generate (NDJSON streaming by default), /api/embed and /api/embeddings
(the pool's: `ollama_models`, `ollama_pool`). Each inference route takes the same lease as its
/v1 twin (`wire.ollama` translates, `wire.ollama_out` renders, `inference.turn` runs the
turn); errors on /api/* take Ollama's envelope, ``{"error": "..."}``.

``keep_alive`` drives the tiers once the answer is out (`KeepAlive`, in the background: the
answer never waits for it): ``0`` demotes the model to tier 2 as soon as no other request
uses it; a duration holds it in tier 1 that long, then demotes it; a negative value holds it
until a later keep_alive; absent, the server's own tier policy applies. A value it cannot
honour (not a duration, not finite, over a year) is a 400 before any work.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines.records import ChatRequest
from hypnos.planner.types import Tier
from hypnos.service.http.caller import caller_of
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.http.sink import http_turn
from hypnos.service.inference.capabilities import EMBEDDINGS
from hypnos.service.inference.chat_checks import chat_lease, has_template, raw_lease
from hypnos.service.inference.leased import LeasedCall, leased
from hypnos.service.inference.text import check_text_model
from hypnos.service.inference.turn import RequestFor
from hypnos.service.observe.record import record_of
from hypnos.service.state import state_of
from hypnos.service.wire.body import json_body
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.model import validate
from hypnos.service.wire.ollama import (ChatBody, EmbedBody, EmbeddingsBody, GenerateBody,
                                        chat_body, generate_chat_body, keep_alive_secs,
                                        parse_generate, raw_request)
from hypnos.service.wire.ollama_out import NDJSON, OllamaCodec, now

bp = Blueprint("ollama")


def _keep_alive(request: Request, model: str, secs: float | None) -> Callable[[], None]:
    """The after-turn hook that hands the request's keep_alive to the timers (returns at
    once)."""
    return partial(state_of(request).keep_alive.after_request, model, secs)


# ------------------------------------------------------------------ chat and generate

@bp.post("/api/chat")
@needs_ready
@endpoint("Ollama chat: NDJSON lines unless stream is false", body=ChatBody,
          ok={**json_object("model", "message", "done"), NDJSON: {"type": "string"}},
          errors=(404, 422, 429, 500, 503, 507))
async def chat(request: Request) -> HTTPResponse | None:
    wire, body = chat_body(json_body(request))
    keep = keep_alive_secs(wire.keep_alive)         # refused before any work
    params = parse_chat(body, state_of(request).config.limits)
    return await http_turn(request, chat_lease(caller_of(request), params), params.request,
                           OllamaCodec(params.model, "message"), stream=wire.stream is not False,
                           after=[_keep_alive(request, params.model, keep)])


@bp.post("/api/generate")
@needs_ready
@endpoint("Ollama generate: a prompt under the model's template (raw, or a model without "
          "one: as it is); NDJSON lines unless stream is false", body=GenerateBody,
          ok={**json_object("model", "response", "done"), NDJSON: {"type": "string"}},
          errors=(404, 422, 429, 500, 503, 507))
async def generate(request: Request) -> HTTPResponse | None:
    wire = parse_generate(json_body(request))
    keep = keep_alive_secs(wire.keep_alive)
    st = state_of(request)
    if not wire.prompt:           # Ollama's way to load (or, with keep_alive 0, unload)
        await _load_or_unload(request, wire.model, keep)
        return json_response({"model": wire.model, "created_at": now(), "response": "",
                              "done": True, "done_reason": "unload" if keep == 0 else "load"})
    raw = raw_request(wire, st.config.limits)
    lease: AbstractAsyncContextManager[LeasedCall]
    chosen: RequestFor = raw
    if wire.raw:
        lease = raw_lease(caller_of(request), wire.model, wire.prompt, raw.max_tokens)
    else:
        params = parse_chat(generate_chat_body(wire), st.config.limits)
        lease = chat_lease(caller_of(request), params, raw_without_template=True)

        async def chosen(call: LeasedCall) -> ChatRequest:
            """As Ollama: a model without a template completes the prompt as it is."""
            return params.request if wire.images or has_template(call.chat) else raw
    return await http_turn(request, lease, chosen, OllamaCodec(wire.model, "response"),
                           stream=wire.stream is not False,
                           after=[_keep_alive(request, wire.model, keep)])


async def _load_or_unload(request: Request, model: str, keep: float | None) -> None:
    """/api/generate without a prompt: load the model (waiting for requests that are
    loading it), or with keep_alive 0 unload it (waiting for the requests using it)."""
    sched, timers = state_of(request).scheduler, state_of(request).keep_alive
    check_text_model(sched, model)
    if keep != 0 and sched.get(model).tier is not Tier.GPU:
        await sched.move(model, Tier.GPU, wait_idle=True)
    timers.after_request(model, keep)
    if keep == 0:
        await timers.settled(model)


# ------------------------------------------------------------------ embeddings

@bp.post("/api/embed")
@needs_ready
@endpoint("Ollama embed: one vector per input", body=EmbedBody,
          ok=json_object("model", "embeddings"), errors=(404, 429, 500, 503, 507))
async def embed(request: Request) -> HTTPResponse:
    wire = validate(EmbedBody, json_body(request))
    keep = keep_alive_secs(wire.keep_alive)
    vectors, prompt_tokens = await _vectors(request, wire)
    _keep_alive(request, wire.model, keep)()
    return json_response({"model": wire.model, "embeddings": vectors,
                          "prompt_eval_count": prompt_tokens})


@bp.post("/api/embeddings")
@needs_ready
@endpoint("Ollama's older embeddings route: one prompt, one vector", body=EmbeddingsBody,
          ok=json_object("embedding"), errors=(404, 429, 500, 503, 507))
async def embeddings(request: Request) -> HTTPResponse:
    wire = validate(EmbeddingsBody, json_body(request))
    keep = keep_alive_secs(wire.keep_alive)
    vectors, _ = await _vectors(request, wire)
    _keep_alive(request, wire.model, keep)()
    return json_response({"embedding": vectors[0]})


async def _vectors(request: Request, wire: EmbedBody | EmbeddingsBody
                   ) -> tuple[list[list[float]], int]:
    texts = wire.texts
    async with leased(caller_of(request), wire.model, EMBEDDINGS, param="input") as call:
        result = await call.run(call.embedder.embed, texts)
    record_of(request).embedding(result)
    return result.vectors, result.prompt_tokens
