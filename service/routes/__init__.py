"""Every route family, in the order the app registers them. One module per family, each
exposing ``bp``: parse, one inference call, render. No route imports another."""
from __future__ import annotations

from hypnos.service.routes import (chat, completions, documents, embeddings, entities, images,
                                   logs, mcp, memory, messages, metrics, ollama, ollama_models,
                                   ollama_pool, openapi, playground, pool, realtime, rerank,
                                   responses, responses_stored, sessions, speech, status,
                                   transcriptions)

ROUTES = [status.bp, memory.bp, chat.bp, messages.bp, responses.bp, responses_stored.bp,
          completions.bp, embeddings.bp, rerank.bp, transcriptions.bp, speech.bp, sessions.bp,
          metrics.bp, pool.bp, logs.bp, documents.bp, entities.bp, images.bp, ollama.bp,
          ollama_models.bp, ollama_pool.bp, mcp.bp, realtime.bp, playground.bp, openapi.bp]
