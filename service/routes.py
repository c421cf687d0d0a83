"""Every route family, in the order the app registers them. One module per family, each
exposing ``bp``: parse, one inference call, render. No route imports another."""
from __future__ import annotations

from hypnos.service import (route_chat, route_completions, route_documents, route_embeddings,
                            route_entities, route_images, route_logs, route_memory,
                            route_metrics, route_openapi, route_playground, route_pool,
                            route_sessions, route_speech, route_status, route_transcriptions)

ROUTES = [route_status.bp, route_memory.bp, route_chat.bp, route_completions.bp,
          route_embeddings.bp, route_transcriptions.bp, route_speech.bp, route_sessions.bp,
          route_metrics.bp, route_pool.bp, route_logs.bp, route_documents.bp, route_entities.bp,
          route_images.bp, route_playground.bp, route_openapi.bp]
