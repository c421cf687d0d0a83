"""Rerank: one query against documents, each scored by the model the request names, results
sorted by score. The one entry point ``rerank(caller, params)`` takes typed input (no HTTP
request), so POST /v1/rerank and the MCP tool share it.

Two kinds of model can rank (``registry.RERANK``): a reranker GGUF (modality ``rerank``, rank
pooling) and any chat model (modality ``text_generation``: its yes/no judgement,
``engines/llama/judge``). Anything else is a 400 naming the pool's models that can.

Budget on a chat model: the rerank takes one ordinary lease (so it queues, counts and is
timed like a chat request, and a swap waits for it), but it evaluates in a scratch context of
at most one slot's size built for the call and freed after it. It takes no slot, evicts no
slot's KV and stores nothing in the prompt cache, so the conversations an agent keeps in
that model's slots and cache are as warm after a rerank of 1,000 documents as before it.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.engines import registry
from hypnos.engines.protocols import Reranker
from hypnos.engines.records import RerankRequest, RerankResult
from hypnos.service import errors
from hypnos.service.inference.caller import Caller
from hypnos.service.inference.capabilities import Family
from hypnos.service.inference.leased import leased
from hypnos.service.scheduling.scheduler import Scheduler

RERANK = Family("rerank", ("rerank", "text_generation"), registry.RERANK, "reranker")


@dataclass
class RerankParams:
    model: str
    query: str
    documents: list[str]
    top_n: int | None = None                # None: every document
    instruction: str | None = None          # a chat model's judging instruction


@dataclass
class Ranked:
    """The documents by score, best first (``top_n`` of them), and what the call cost."""
    order: list[tuple[int, float]]          # (document index, relevance score)
    result: RerankResult
    telemetry: dict
    headers: dict                           # the lease's wait headers


def rankers(sched: Scheduler) -> list[str]:
    """The enabled pool models that can rank, by id."""
    return sorted(st.id for st in sched.models.values() if st.enabled and any(
        m in st.cfg.all_modalities for m in RERANK.modalities) and RERANK.capability in
        registry.capabilities(st.cfg.engine, st.cfg.modality))


def check(sched: Scheduler, params: RerankParams, max_documents: int) -> None:
    """Before anything loads: an unknown model is a 404; a model that cannot rank (naming
    those that can), no documents or too many, ``top_n`` below 1 are 400s."""
    with errors.refusals_as_http():
        st = sched.get(params.model)
    if not any(m in st.cfg.all_modalities for m in RERANK.modalities) or (
            registry.is_available(st.cfg.engine, st.cfg.modality) and RERANK.capability
            not in registry.capabilities(st.cfg.engine, st.cfg.modality)):
        can = rankers(sched)
        raise errors.InvalidRequest(
            f"The model '{params.model}' (modality {st.cfg.modality}) cannot rank documents; "
            + (f"models that can: {', '.join(can)}" if can else
               "no model in the pool can (add a reranker GGUF with modality \"rerank\", or a "
               "chat model)"), param="model")
    n = len(params.documents)
    if n == 0:
        raise errors.InvalidRequest("'documents' must hold at least one document",
                                    param="documents")
    if n > max_documents:
        raise errors.InvalidRequest(f"'documents' holds {n} documents, above "
                                    f"max_rerank_documents ({max_documents})",
                                    param="documents")
    # Past the number of documents it means all of them, as llama-server and Cohere read it
    # (LangChain's CohereRerank sends top_n=3 whatever the count).
    if params.top_n is not None and params.top_n < 1:
        raise errors.InvalidRequest(f"'top_n' must be at least 1, got {params.top_n}",
                                    param="top_n")


def order(scores: list[float], top_n: int | None) -> list[tuple[int, float]]:
    """(index, score) by score, highest first (ties keep input order), cut to ``top_n``."""
    ranked = sorted(enumerate(scores), key=lambda p: -p[1])
    return ranked[:top_n] if top_n is not None else ranked


async def rerank(caller: Caller, params: RerankParams) -> Ranked:
    """Check, lease the model, score every document, sort. Raises the HTTP errors
    (``errors``) a route answers with: 400 (see ``check``; a document over the context
    names ``documents``), 404, 429/503/507 from the scheduler."""
    check(caller.sched, params, caller.limits.max_rerank_documents)
    req = RerankRequest(query=params.query, documents=params.documents,
                        instruction=params.instruction)
    async with leased(caller, params.model, RERANK, param="documents", checked=True) as call:
        engine = call.engine
        if not hasattr(engine, "rerank"):       # e.g. a chat model split over RPC workers
            raise errors.InvalidRequest(f"The model '{params.model}' cannot rank documents "
                                        "as it is loaded now", param="model")
        ranker: Reranker = engine               # type: ignore[assignment]
        result = await call.run(ranker.rerank, req, what="Reranking")
        telemetry = call.telemetry({"queue_ms": call.queue_ms})
        headers = call.wait_headers()
    return Ranked(order(result.scores, params.top_n), result, telemetry, headers)
