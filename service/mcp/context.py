"""What a tool call may use (`ToolContext`) and the rerank scorer's interface (`Ranker`):
plain types without the MCP SDK, so the route can build a context whether or not the SDK
is installed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hypnos.service.config.schema import Config, LimitsConfig
from hypnos.service.inference.caller import Caller
from hypnos.service.mcp.files import roots_of

#: The ASGI scope's entry holding the request's `ToolContext` (routes/mcp.py puts it there,
#: the SDK server's handlers read it back).
SCOPE_KEY = "hypnos.mcp"

class Ranker(Protocol):
    """Scores documents against a query with a pool model (POST /v1/rerank's scorer): the
    `rerank` tool calls it, and is listed only when one is given and a model can rank."""

    def models(self, ctx: ToolContext) -> list[str]:
        """The ids of the pool models that can rank, best choice first."""
        ...

    async def rank(self, ctx: ToolContext, model: str, query: str,
                   documents: list[str]) -> list[tuple[int, float]]:
        """(index into ``documents``, relevance score) for each document, any order.
        Raises `errors.HypnosError` (or `ToolRefused`) to refuse."""
        ...


@dataclass(frozen=True)
class ToolContext:
    """What a tool call may use: the request's `Caller` (scheduler, limits, metrics, record
    and deadline: the same as an HTTP route's), the config, and the rerank scorer if any."""
    caller: Caller
    config: Config
    ranker: Ranker | None = None

    @property
    def limits(self) -> LimitsConfig:
        return self.caller.limits

    def file_roots(self) -> list[Path]:
        source = self.config.source
        return roots_of(self.config.server.mcp_file_roots,
                        source.parent if source is not None else None)


