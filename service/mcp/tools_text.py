"""The tools over text: embed, extract_entities, rerank, ask_model, and generate_image (a
text prompt in, a picture out). Each makes its HTTP route's leased engine call; ask_model
runs the one chat turn (`inference.turn.chat_turn`) of /v1/chat/completions."""
from __future__ import annotations

import base64
import secrets

import mcp_types as types

from hypnos.engines.records import ExtractRequest, ImageRequest
from hypnos.service.config.schema import ImageConfig
from hypnos.service.inference.capabilities import CHAT, EMBEDDINGS, ENTITIES, IMAGES
from hypnos.service.inference.chat_checks import chat_lease
from hypnos.service.inference.leased import leased
from hypnos.service.inference.turn import FrameSink, chat_turn
from hypnos.service.mcp.refusal import ToolRefused
from hypnos.service.mcp.context import ToolContext
from hypnos.service.mcp.tools import ToolSpec, json_result, number_arg, text_arg
from hypnos.service.wire.chat import parse_chat
from hypnos.service.wire.model import input_texts
from hypnos.service.wire.openai_out import ChatCompletionCodec

TEXTS = {"oneOf": [{"type": "string", "minLength": 1},
                   {"type": "array", "minItems": 1, "items": {"type": "string"}}]}


def texts_arg(args: dict, name: str, max_chars: int) -> list[str]:
    value = args.get(name)
    if isinstance(value, str) and value:
        value = [value]
    if not isinstance(value, list) or not value or \
            not all(isinstance(t, str) and t for t in value):
        raise ToolRefused(f"'{name}' must be a non-empty string or a non-empty array of "
                          "non-empty strings")
    return input_texts(value, max_chars)


# ------------------------------------------------------------------ embed

async def _embed(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    texts = texts_arg(args, "input", ctx.limits.max_prompt_chars)
    async with leased(ctx.caller, model, EMBEDDINGS, param="input", checked=True) as call:
        result = await call.run(call.embedder.embed, texts)
    ctx.caller.record.embedding(result)
    dims = len(result.vectors[0]) if result.vectors else 0
    return json_result({"model": model, "dimensions": dims,
                        "data": [{"index": i, "embedding": list(v)}
                                 for i, v in enumerate(result.vectors)],
                        "usage": {"prompt_tokens": result.prompt_tokens}})


EMBED = ToolSpec(
    name="embed", title="Embed texts", family=EMBEDDINGS,
    summary=("Embedding vectors of one text or several (the same vectors as POST "
             "/v1/embeddings), for semantic search and similarity."),
    properties={"input": {**TEXTS, "description": "A text, or an array of texts"}},
    required=("input",), run=_embed)


# ------------------------------------------------------------------ extract_entities

async def _entities(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    texts = texts_arg(args, "input", ctx.limits.max_prompt_chars)
    labels = args.get("labels")
    if isinstance(labels, str):
        labels = [labels]
    if not isinstance(labels, list) or not labels or \
            not all(isinstance(x, str) and x.strip() for x in labels):
        raise ToolRefused("'labels' must be a non-empty array of label phrases such as "
                          "\"person\", \"organization\"")
    threshold = number_arg(args, "threshold", 0.0, 1.0, 0.5)
    req = ExtractRequest(texts=texts, labels=list(dict.fromkeys(x.strip() for x in labels)),
                         threshold=float(threshold if threshold is not None else 0.5))
    async with leased(ctx.caller, model, ENTITIES, param="input", checked=True) as call:
        result = await call.run(call.extractor.extract, req)
    return json_result({"model": model, "data": [
        {"index": i, "entities": [{"text": e.text, "label": e.label, "start": e.start,
                                   "end": e.end, "score": round(e.score, 4)} for e in found]}
        for i, found in enumerate(result.entities)]})


ENTITIES_TOOL = ToolSpec(
    name="extract_entities", title="Extract named entities", family=ENTITIES,
    summary=("Find the spans of one text or several that are entities of the labels you "
             "name (free-text labels such as person, company, date: zero-shot), with "
             "character offsets and scores."),
    properties={"input": {**TEXTS, "description": "A text, or an array of texts"},
                "labels": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "threshold": {"type": "number", "minimum": 0, "maximum": 1,
                              "description": "Lowest score kept; default 0.5"}},
    required=("input", "labels"), run=_entities)


# ------------------------------------------------------------------ rerank

def _rankers(ctx: ToolContext) -> list[str]:
    return ctx.ranker.models(ctx) if ctx.ranker is not None else []


async def _rerank(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    if ctx.ranker is None:          # not listed then; a stale client may still call it
        raise ToolRefused("This server has no rerank scorer")
    query = text_arg(args, "query") or ""
    documents = args.get("documents")
    if not isinstance(documents, list) or not documents or \
            not all(isinstance(d, str) for d in documents):
        raise ToolRefused("'documents' must be a non-empty array of strings")
    most = ctx.limits.max_rerank_documents
    if len(documents) > most:
        raise ToolRefused(f"'documents' holds {len(documents)} documents; at most {most} "
                          "are ranked in one call (limits.max_rerank_documents)")
    input_texts([query, *documents], ctx.limits.max_prompt_chars)
    top_n = number_arg(args, "top_n", 1, len(documents), None, integer=True)
    scores = sorted(await ctx.ranker.rank(ctx, model, query, documents),
                    key=lambda pair: -pair[1])
    results = [{"index": i, "relevance_score": s, "document": documents[i]}
               for i, s in scores[:int(top_n) if top_n else None]]
    return json_result({"model": model, "results": results})


RERANK = ToolSpec(
    name="rerank", title="Rerank documents", models=_rankers, listed_when_empty=False,
    summary=("Order documents by how well each answers a query (a relevance score each, "
             "best first), as a retrieval pipeline's rerank step."),
    properties={"query": {"type": "string", "minLength": 1},
                "documents": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                "top_n": {"type": "integer", "minimum": 1,
                          "description": "Keep only the best this many"}},
    required=("query", "documents"), run=_rerank)


# ------------------------------------------------------------------ generate_image

MIN_SIDE, MAX_SIDE, STEP = 256, 2048, 16


async def _image(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    prompt = text_arg(args, "prompt") or ""
    image = ctx.caller.sched.get(model).cfg.image or ImageConfig()
    side = int(number_arg(args, "width", MIN_SIDE, MAX_SIDE, 1024, integer=True) or 1024)
    high = int(number_arg(args, "height", MIN_SIDE, MAX_SIDE, 1024, integer=True) or 1024)
    steps = number_arg(args, "steps", 1, 100, image.steps, integer=True)
    seed = number_arg(args, "seed", 0, 2**32 - 1, None, integer=True)
    req = ImageRequest(prompt=prompt, negative_prompt=text_arg(args, "negative_prompt") or "",
                       width=side // STEP * STEP, height=high // STEP * STEP,
                       steps=int(steps or image.steps), cfg_scale=image.cfg_scale,
                       seed=secrets.randbelow(2**31) if seed is None else int(seed),
                       sampler=image.sampler)
    async with leased(ctx.caller, model, IMAGES, param="prompt", checked=True) as call:
        images = await call.run(call.generator.generate, req)
    return types.CallToolResult(content=[
        *(types.ImageContent(data=base64.b64encode(i.png).decode("ascii"),
                             mime_type="image/png") for i in images),
        types.TextContent(text=f"{len(images)} image(s) of {req.width}x{req.height} from "
                               f"{model}, seed {req.seed}")])


IMAGE = ToolSpec(
    name="generate_image", title="Generate an image", family=IMAGES,
    listed_when_empty=False,
    summary="Make a picture from a text prompt, locally: returns a PNG image.",
    properties={"prompt": {"type": "string", "minLength": 1},
                "negative_prompt": {"type": "string"},
                "width": {"type": "integer", "minimum": MIN_SIDE, "maximum": MAX_SIDE},
                "height": {"type": "integer", "minimum": MIN_SIDE, "maximum": MAX_SIDE},
                "steps": {"type": "integer", "minimum": 1, "maximum": 100},
                "seed": {"type": "integer", "minimum": 0}},
    required=("prompt",), run=_image)


# ------------------------------------------------------------------ ask_model

class WholeAnswer(FrameSink):
    """The turn's whole answer, kept (ask_model never streams)."""

    def __init__(self) -> None:
        self.body: dict | None = None

    async def open(self, media_type: str, headers: dict[str, str]) -> None:
        raise AssertionError("ask_model does not stream")

    async def send(self, frame: str) -> None:
        raise AssertionError("ask_model does not stream")

    async def close(self) -> None:
        raise AssertionError("ask_model does not stream")

    async def whole(self, body: dict, headers: dict[str, str]) -> None:
        self.body = body


async def _ask(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    messages = []
    if system := text_arg(args, "system"):
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": text_arg(args, "prompt") or ""})
    body: dict = {"model": model, "messages": messages}
    for name in ("max_tokens", "temperature"):
        if args.get(name) is not None:
            body[name] = args[name]
    params = parse_chat(body, ctx.limits)
    sink = WholeAnswer()
    await chat_turn(ctx.caller, chat_lease(ctx.caller, params), params.request,
                    ChatCompletionCodec(params), sink, stream=False)
    assert sink.body is not None
    choice = sink.body["choices"][0]
    text = choice["message"].get("content") or ""
    return json_result({"model": model, "text": text,
                        "finish_reason": choice.get("finish_reason"),
                        "usage": sink.body.get("usage")}, text=text)


ASK = ToolSpec(
    name="ask_model", title="Ask a local model", family=CHAT,
    summary=("Ask one of the server's chat models a one-shot question (a second opinion, "
             "a draft, a summary) and get its answer as text."),
    properties={"prompt": {"type": "string", "minLength": 1},
                "system": {"type": "string", "description": "A system message"},
                "max_tokens": {"type": "integer", "minimum": 1},
                "temperature": {"type": "number", "minimum": 0, "maximum": 2}},
    required=("prompt",), run=_ask)
