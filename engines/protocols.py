"""The small Protocols every engine implements (structurally: engines do not inherit them).

Threading contract: every method here blocks and is called from a worker thread, never on
the event loop. ``cancel`` is a ``threading.Event`` checked per token / chunk / step / page;
when it is set the call returns what it has (finish_reason "cancelled") instead of raising.
Engines raise ``errors.EngineError`` subclasses, never bare library exceptions. Properties
are plain reads (no blocking, any thread); they describe the loaded engine and are only
meaningful between ``load`` and ``unload``.

What a kind of engine can do is known before it loads: ``registry.capabilities``.
Importing this module imports no engine module and no engine library.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from hypnos.engines.records import (
    ChatRequest, ChatResult, ConvertedPage, DocumentRequest, EmbedResult, ExtractRequest,
    ExtractResult, GeneratedImage, ImageRequest, LoadReport, LoadSpec, OnAudio, OnPage, OnToken,
    OpenedDocument, RerankRequest, RerankResult, SpeechRequest, TranscribeRequest, TranscribeResult,
)

if TYPE_CHECKING:                                  # pure, but only the type is needed
    from hypnos.engines.chat_format import ChatFormat


class Engine(Protocol):
    """Lifecycle every engine shares. Construction is cheap and imports nothing heavy."""

    def load(self, spec: LoadSpec) -> LoadReport:
        """Build the engine (tier 1). Imports the heavy library here. Blocks."""
        ...

    def unload(self) -> None:
        """Free everything load() built. Idempotent. Blocks until freed."""
        ...


@runtime_checkable
class ReportsDevice(Protocol):
    """An engine that says, once loaded, where it really computes (the scheduler trusts it
    over the placement's plan: an onnxruntime session that fell back to the CPU books no
    VRAM). Engines without it are taken to run where they were placed."""

    @property
    def device(self) -> str | None:
        """Where it computes ("cpu", "cuda", "metal", ...) as the library reports it after load
        (None before)."""
        ...


@runtime_checkable
class OffloadsLayers(ReportsDevice, Protocol):
    """An engine that splits its layers between host and GPU (llama.cpp)."""

    @property
    def offloaded_layers(self) -> int:
        """Layers the library says it put on a GPU at the last load (0: all on the host)."""
        ...


@runtime_checkable
class SplitsLayers(Protocol):
    """An engine whose layers are split across RPC workers, its local part in a child process
    (``llama.split.SplitChatEngine``). The scheduler demotes it once ``lost``."""

    @property
    def lost(self) -> str:
        """Why the model is gone ("" while it serves): an RPC worker stopped answering or
        stalled, the child process died, the model was unloaded."""
        ...

    @property
    def split_layers(self) -> dict[str, int]:
        """Layers llama.cpp put on each device at the last load (a worker's endpoint, or
        the local device) -> count."""
        ...

    def child_rss(self) -> int:
        """Resident memory of the child process holding the local part (0 when none).
        Reads /proc; any thread."""
        ...


# ------------------------------------------------------------------------- chat

class ChatEngine(Engine, Protocol):
    @property
    def format(self) -> ChatFormat | None:
        """How this model writes tool calls and thinking, read off its chat template at load
        (None before load)."""
        ...

    @property
    def n_ctx_per_slot(self) -> int:
        """Tokens one slot's context holds (prompt + answer); 0 before load."""
        ...

    def chat(self, req: ChatRequest, on_text: OnToken | None,
             cancel: threading.Event) -> ChatResult:
        """Generate one answer. ``on_text`` gets each ``ChatDelta`` (valid UTF-8, never a
        special token or a delimiter) as it is decoded, from the calling thread. Up to ``slots``
        calls may run at once from different threads; more block until a slot frees.
        Raises ContextOverflow when prompt + max_tokens cannot fit the context."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes (no special tokens added)."""
        ...

    def prompt_tokens(self, req: ChatRequest) -> int:
        """Tokens the request's prompt takes, exactly as ``chat`` would send it (template,
        tools and media included). Blocks (renders and tokenizes); any thread."""
        ...


@runtime_checkable
class KeepsWeights(Engine, Protocol):
    """An engine that can free its context and keep its loaded weights (tier 2 where the
    engine computes from host memory: ``planner.budgets.tier2_keeps_engine``). The next
    ``load`` of the same weights builds only the context."""

    def release_context(self) -> bool:
        """Free the context (KV cache, compute buffers), keep the weights; False when
        nothing is loaded. Blocks; never while a request runs. The caller decides whether the
        kept weights are host memory (not on a discrete GPU, where they would hold VRAM)."""
        ...

    @property
    def holds_weights(self) -> bool:
        """Loaded weights are held (with or without a context)."""
        ...


class ParkedState(Protocol):
    """What ``KVChatEngine.park`` returns, as /v1/memory/kv-park reports it."""

    @property
    def slots(self) -> int:
        """Slots parked."""
        ...

    @property
    def tokens(self) -> int:
        """Tokens parked, all slots together."""
        ...

    @property
    def bytes(self) -> int:
        """Host memory the parked KV state takes."""
        ...


P = TypeVar("P", bound=ParkedState)


@runtime_checkable
class KVChatEngine(ChatEngine, Protocol[P]):
    """A chat engine whose per-slot KV state can leave and come back (llama.cpp). All
    methods block; the KV copies run on the engine's decode thread between two steps.
    ``P`` is the engine's own parked-state type: ``restore`` takes only what its ``park``
    returned."""

    @property
    def max_sessions(self) -> int:
        """Session keys that can be bound at once (one per slot)."""
        ...

    def park(self) -> P | None:
        """Copy every used slot's KV state and tokens to host memory (an object with
        ``slots``, ``tokens``, ``bytes``), or None when nothing is cached. Before unload."""
        ...

    def restore(self, parked: P) -> tuple[int, float]:
        """After load: (tokens restored, ms); (0, 0.0) when the layout or weights differ.
        ``parked`` is single use."""
        ...

    def export_session(self, slot_or_key: int | str) -> bytes:
        """A checksummed blob of one slot's conversation. Raises SessionNotFound,
        SessionBusy."""
        ...

    def import_session(self, blob: bytes, key: str, partition: str = "") -> int:
        """Bind ``key`` to a slot holding the blob's conversation, reusable by requests of
        ``partition`` only (``ChatRequest.partition``); returns its tokens. Raises
        SessionCorrupt, SessionMismatch, SessionCapacity, SessionBusy."""
        ...

    def release_session(self, key: str) -> bool:
        """Unbind ``key``; idempotent (False when it was not bound)."""
        ...

    def sessions(self) -> dict[str, int]:
        """Bound session keys -> tokens cached in their slot. Does not block on decoding."""
        ...


# ------------------------------------------------------------------- embeddings

class Embedder(Engine, Protocol):
    def embed(self, texts: list[str], cancel: threading.Event) -> EmbedResult:
        """Embed every text (batched inside). Raises ContextOverflow when one text is longer
        than the model accepts and cannot be truncated by the model's own rules."""
        ...


# ------------------------------------------------------------------------ rerank

class Reranker(Engine, Protocol):
    def rerank(self, req: RerankRequest, cancel: threading.Event) -> RerankResult:
        """One relevance score per document, in input order. Raises ContextOverflow naming
        ``documents[i]`` when the query with that document does not fit the context.
        ``cancel`` is checked between batches; a cancelled call raises EngineError."""
        ...


# ---------------------------------------------------------------- transcription

class Transcriber(Engine, Protocol):
    def transcribe(self, req: TranscribeRequest, cancel: threading.Event) -> TranscribeResult:
        """Transcribe the whole file. Raises AudioDecodeError for undecodable input."""
        ...


# ----------------------------------------------------------------------- speech

class Speaker(Engine, Protocol):
    @property
    def sample_rate(self) -> int:
        """Samples per second of the PCM ``synthesize`` hands to ``on_audio``."""
        ...

    def synthesize(self, req: SpeechRequest, on_audio: OnAudio,
                   cancel: threading.Event) -> float:
        """Synthesize phrase by phrase, calling ``on_audio`` with each phrase's PCM (and the
        silence between phrases) as soon as it is ready. Returns the audio seconds made."""
        ...


# ------------------------------------------------------------------- documents

class Converter(Engine, Protocol):
    def open(self, req: DocumentRequest) -> OpenedDocument:
        """Detect the format and count pages. Raises UnsupportedDocument for an unknown
        format, a corrupt file or a page range outside the document. Blocks."""
        ...

    def convert_pages(self, doc: OpenedDocument, on_page: OnPage,
                      cancel: threading.Event) -> list[ConvertedPage]:
        """Convert ``doc.pages`` in order, calling ``on_page`` with each as soon as it is
        ready; ``cancel`` is checked between pages (a cancelled call returns the pages done).
        Raises EngineError when the conversion fails midway."""
        ...


# ------------------------------------------------------------- entity extraction

class Extractor(Engine, Protocol):
    def extract(self, req: ExtractRequest, cancel: threading.Event) -> ExtractResult:
        """Find the spans of every text that score at least ``threshold`` for a label.
        Long texts run in overlapping windows and many labels in families, transparently.
        ``cancel`` is checked between passes (a cancelled call returns what it found)."""
        ...


# ----------------------------------------------------------------------- images

class ImageGenerator(Engine, Protocol):
    def generate(self, req: ImageRequest, cancel: threading.Event) -> list[GeneratedImage]:
        """Make ``req.n`` PNG images, one at a time (``cancel`` is checked between them;
        a cancelled call returns the images made). With ``references`` the model edits or
        composes from them. Raises EngineError when the library fails."""
        ...
