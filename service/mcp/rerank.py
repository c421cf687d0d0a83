"""The rerank tool's scorer: POST /v1/rerank's own (``inference.rerank``), behind the
`Ranker` interface the tool calls, with the request's `Caller`."""
from __future__ import annotations

from hypnos.service.inference.rerank import RerankParams, rankers, rerank
from hypnos.service.mcp.context import ToolContext


class PoolRanker:
    """Ranks with the pool model the call names: a reranker GGUF or a chat model's
    judgement, exactly as the HTTP route does (same checks, lease, record and limits)."""

    def models(self, ctx: ToolContext) -> list[str]:
        return rankers(ctx.caller.sched)

    async def rank(self, ctx: ToolContext, model: str, query: str,
                   documents: list[str]) -> list[tuple[int, float]]:
        ranked = await rerank(ctx.caller, RerankParams(model, query, documents))
        return ranked.order
