"""Ollama's API (Open WebUI, Continue, editor plugins, LangChain's ChatOllama) on the pool:
/api/chat and /api/generate (NDJSON streaming by default), /api/embed and /api/embeddings,
/api/tags, /api/show, /api/ps and /api/version.
Each inference route takes the same lease as its /v1 twin (`wire.ollama` translates); errors
on /api/* take Ollama's envelope, ``{"error": "..."}``.

``keep_alive`` drives the tiers once the answer is out (`KeepAlive`, in the background: the
answer never waits for it): ``0`` demotes the model to tier 2 as soon as no other request
uses it; a duration holds it in tier 1 that long, then demotes it; a negative value holds it
until a later keep_alive; absent, the server's own tier policy applies. A value it cannot
honour (not a duration, not finite, over a year) is a 400 before any work.
"""
from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from hypnos.engines.records import ChatDelta, ChatRequest, ChatResult
from hypnos.planner.context import request_context, tokens_from_chars
from hypnos.planner.types import Tier
from hypnos.service import errors
from hypnos.service.http.caller import caller_of
from hypnos.service.wire.body import json_body
from hypnos.service.http.openapi import endpoint, json_object, needs_ready
from hypnos.service.inference.capabilities import EMBEDDINGS
from hypnos.service.inference.chat_checks import chat_lease, check_chat, media_bytes
from hypnos.service.inference.leased import leased
from hypnos.service.observe.record import record_of
from hypnos.service.inference.text import (chat_counter, check_text_model, record,
                                           run_choices, stream_choices, text_lease)
from hypnos.service.scheduling.accel import model_device
from hypnos.service.wire.chat import Sampling, parse_chat, parse_sampling
from hypnos.service.wire.model import validate
from hypnos.service.wire.ollama import (ChatBody, EmbedBody, EmbeddingsBody, GenerateBody,
                                        ModelBody,
                                        chat_body, format_grammar,
                                        generate_chat_body, keep_alive_secs, parse_generate)
from hypnos.service.state import state_of
from hypnos.service.config.schema import LimitsConfig
from hypnos.engines.protocols import ChatEngine
from collections.abc import Callable
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.inference.leased import LeasedCall

bp = Blueprint("ollama")
VERSION = "0.12.0"          # the Ollama API version whose shapes these routes follow
NDJSON = "application/x-ndjson"


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _stats(r: ChatResult, started: float, load_ms: float) -> dict:
    """Ollama's closing counters, in nanoseconds."""
    t = r.timings
    return {"total_duration": int((time.perf_counter() - started) * 1e9),
            "load_duration": int(load_ms * 1e6), "prompt_eval_count": r.prompt_tokens,
            "prompt_eval_duration": int(t.prefill_ms * 1e6), "eval_count": r.completion_tokens,
            "eval_duration": int(t.decode_ms * 1e6)}


def _done_reason(r: ChatResult) -> str:
    return "length" if r.finish_reason == "length" else "stop"


def _calls(r: ChatResult) -> list[dict]:
    out = []
    for c in r.tool_calls:
        try:
            args = json.loads(c.arguments or "{}")
        except ValueError:
            args = {}
        out.append({"function": {"name": c.name, "arguments": args}})
    return out


def _apply_keep_alive(request: Request, model: str, secs: float | None) -> None:
    """Hand the request's keep_alive to the timers; returns at once."""
    state_of(request).keep_alive.after_request(model, secs)


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
    stream = wire.stream is not False
    started = time.perf_counter()
    async with chat_lease(caller_of(request), params) as call:
        if stream:
            await _stream(request, call, params.request, params.model, "message", started)
        else:
            (r,) = await run_choices(call, [params.request])
            record(caller_of(request), call, [r])
            message: dict = {"role": "assistant", "content": r.text}
            if r.reasoning:
                message["thinking"] = r.reasoning
            if r.tool_calls:
                message["tool_calls"] = _calls(r)
            out = {"model": params.model, "created_at": _now(), "message": message,
                   "done": True, "done_reason": _done_reason(r),
                   **_stats(r, started, call.lease.tier_switch_ms)}
    _apply_keep_alive(request, params.model, keep)
    return None if stream else json_response(out)


@bp.post("/api/generate")
@needs_ready
@endpoint("Ollama generate: a prompt under the model's template (raw, or a model without "
          "one: as it is); NDJSON lines unless stream is false", body=GenerateBody,
          ok={**json_object("model", "response", "done"), NDJSON: {"type": "string"}},
          errors=(404, 422, 429, 500, 503, 507))
async def generate(request: Request) -> HTTPResponse | None:
    body = json_body(request)
    wire = parse_generate(body)
    keep = keep_alive_secs(wire.keep_alive)
    limits = state_of(request).config.limits
    stream = wire.stream is not False
    if not wire.prompt:           # Ollama's way to load (or, with keep_alive 0, unload)
        await _load_or_unload(request, wire.model, keep)
        return json_response({"model": wire.model, "created_at": _now(), "response": "",
                              "done": True, "done_reason": "unload" if keep == 0 else "load"})
    started = time.perf_counter()
    raw = _raw_request(wire, limits)
    if wire.raw:
        req = raw
        check_text_model(state_of(request).scheduler, wire.model)
        estimate = request_context(tokens_from_chars(len(wire.prompt)), req.max_tokens)
        lease = text_lease(caller_of(request), wire.model, estimate)
    else:
        params = parse_chat(generate_chat_body(wire), limits)
        st = check_chat(caller_of(request), params)
        if params.media:
            params.request.media = await media_bytes(params, limits)
        req = params.request
        lease = text_lease(caller_of(request), wire.model, params.estimated_ctx(),
                           _templated(chat_counter(
                               state_of(request).scheduler.context_window(st), params)))
    async with lease as call:
        if not (wire.raw or wire.images or _has_template(call.chat)):
            req = raw             # as Ollama: a model without a template completes the prompt
        if stream:
            await _stream(request, call, req, wire.model, "response", started)
        else:
            (r,) = await run_choices(call, [req])
            record(caller_of(request), call, [r])
            out = {"model": wire.model, "created_at": _now(), "response": r.text,
                   **({"thinking": r.reasoning} if r.reasoning else {}),
                   "done": True, "done_reason": _done_reason(r),
                   **_stats(r, started, call.lease.tier_switch_ms)}
    _apply_keep_alive(request, wire.model, keep)
    return None if stream else json_response(out)


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


def _raw_request(wire: GenerateBody, limits: LimitsConfig) -> ChatRequest:
    """``/api/generate``'s prompt as it is (no template, no ``system``), ``format`` as its
    grammar."""
    sampling = validate(Sampling, {k: v for k, v in generate_chat_body(wire).items()
                                   if k in Sampling.model_fields})
    return ChatRequest(messages=[], prompt=wire.prompt, grammar=format_grammar(wire.format),
                       **parse_sampling(sampling, limits))


def _has_template(engine: ChatEngine) -> bool:
    """The loaded model renders chat turns: a llama engine says whether its GGUF (or its
    config) carries a chat template; every other chat engine always renders them."""
    return bool(getattr(engine, "has_template", True))


def _templated(count: Callable[[ChatEngine], int | None] | None
               ) -> Callable[[ChatEngine], int | None] | None:
    """``chat_counter``'s count, skipped on a model without a template (its prompt is then
    sent raw, and the engine refuses one past the context itself)."""
    if count is None:
        return None

    def counted(engine: ChatEngine) -> int | None:
        return count(engine) if _has_template(engine) else None
    return counted


def _line(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False) + "\n"


async def _stream(request: Request, call: LeasedCall, req: ChatRequest, model: str, field: str,
                  started: float) -> None:
    """NDJSON: one line per delta (``message`` for chat, ``response`` for generate), then the
    closing line with the counters; a failure after the first line is a line with
    ``error``."""
    response = await request.respond(content_type=NDJSON)

    def piece(d: ChatDelta) -> dict | None:
        if field == "message":
            msg: dict = {"role": "assistant", "content": d.content}
            if d.reasoning:
                msg["thinking"] = d.reasoning
            if d.tool_call is not None:
                msg["tool_calls"] = [{"function": {"name": d.tool_call.name,
                                                   "arguments": json.loads(
                                                       d.tool_call.arguments or "{}")}}]
            return {"message": msg}
        if d.content or d.reasoning:
            return {"response": d.content, **({"thinking": d.reasoning} if d.reasoning else {})}
        return None

    async def send_delta(_index: int, d: ChatDelta) -> None:
        out = piece(d)
        if out is not None:
            await response.send(_line({"model": model, "created_at": _now(), **out,
                                       "done": False}))

    async def nothing() -> None:
        return None

    try:
        (r,) = await stream_choices(call, [req], send_delta, nothing)
    except errors.HypnosError as exc:
        await response.send(_line({"error": exc.message}))
        await response.eof()
        return
    record(caller_of(request), call, [r])
    last = ({"message": {"role": "assistant", "content": ""}} if field == "message"
            else {"response": ""})
    await response.send(_line({"model": model, "created_at": _now(), **last, "done": True,
                               "done_reason": _done_reason(r),
                               **_stats(r, started, call.lease.tier_switch_ms)}))
    await response.eof()


# ------------------------------------------------------------------ embeddings

@bp.post("/api/embed")
@needs_ready
@endpoint("Ollama embed: one vector per input", body=EmbedBody,
          ok=json_object("model", "embeddings"), errors=(404, 429, 500, 503, 507))
async def embed(request: Request) -> HTTPResponse:
    wire = validate(EmbedBody, json_body(request))
    keep = keep_alive_secs(wire.keep_alive)
    vectors, prompt_tokens = await _vectors(request, wire)
    _apply_keep_alive(request, wire.model, keep)
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
    _apply_keep_alive(request, wire.model, keep)
    return json_response({"embedding": vectors[0]})


async def _vectors(request: Request, wire: EmbedBody | EmbeddingsBody
                   ) -> tuple[list[list[float]], int]:
    texts = wire.texts
    async with leased(caller_of(request), wire.model, EMBEDDINGS, param="input") as call:
        result = await call.run(call.embedder.embed, texts)
    record_of(request).embedding(result)
    return result.vectors, result.prompt_tokens


# ------------------------------------------------------------------ the pool

def _details(st: ModelState) -> dict:
    arch = st.cfg.arch
    family = getattr(arch, "architecture", None) or st.cfg.engine
    return {"parent_model": "", "format": "gguf" if st.cfg.engine == "ggml_llama" else
            st.cfg.engine, "family": family, "families": [family],
            "parameter_size": "", "quantization_level": st.cfg.quant or ""}


def _listed(st: ModelState) -> dict:
    return {"name": st.id, "model": st.id, "size": st.weight_bytes, "digest": "",
            "modified_at": _now(), "details": _details(st)}


def _served(sched: Scheduler) -> list:
    """The pool's chat and embedding models (what Ollama's clients can use)."""
    return [st for st in sched.models.values() if st.enabled and set(
        st.cfg.all_modalities) & {"text_generation", "vision", "embeddings"}]


@bp.get("/api/tags")
@endpoint("Ollama tags: the pool's chat and embedding models", ok=json_object("models"))
async def tags(request: Request) -> HTTPResponse:
    return json_response({"models": [_listed(st) for st in _served(state_of(request).scheduler)]})


@bp.get("/api/ps")
@endpoint("Ollama ps: the models in tier 1, with the VRAM booked for them (0 on the CPU)",
          ok=json_object("models"))
async def ps(request: Request) -> HTTPResponse:
    sched = state_of(request).scheduler
    timers = state_of(request).keep_alive
    out = []
    for st in _served(sched):
        if st.tier is not Tier.GPU:
            continue
        placement = sched.placement_of(st)
        on_gpu = model_device(st, placement) not in ("cpu", None)
        out.append({**_listed(st), "expires_at": timers.expires_at(st.id),
                    "size_vram": placement.booked_tier1_bytes if on_gpu else 0,
                    "context_length": sched.context_window(st)})
    return json_response({"models": out})


@bp.post("/api/show")
@endpoint("Ollama show: a model's details and capabilities", body=ModelBody,
          ok=json_object("details", "capabilities"), errors=(404,))
async def show(request: Request) -> HTTPResponse:
    wire = validate(ModelBody, json_body(request))
    st = state_of(request).scheduler.get(wire.id)
    mods = set(st.cfg.all_modalities)
    caps = (["completion"] if mods & {"text_generation", "vision"} else []) + (
        ["embedding"] if "embeddings" in mods else []) + (
        ["vision"] if "vision" in mods else []) + (
        ["tools"] if "text_generation" in mods and st.cfg.tool_format != "none" else [])
    return json_response({"modelfile": "", "parameters": "", "template": "",
                          "details": _details(st), "capabilities": caps,
                          "model_info": {"general.architecture": _details(st)["family"],
                                         "context_length": state_of(request).scheduler
                                         .context_window(st)}})


@bp.get("/api/version")
@endpoint("The Ollama API version these routes follow", ok=json_object("version"))
async def version(request: Request) -> HTTPResponse:
    return json_response({"version": VERSION})

