"""The small Protocols every engine implements, and the plain records they exchange.

Threading contract: every method here blocks and is called from a worker thread, never on
the event loop. ``cancel`` is a ``threading.Event`` checked per token / chunk / step / page;
when it is set the call returns what it has (finish_reason "cancelled") instead of raising.
Engines raise ``EngineError`` subclasses, never bare library exceptions.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from hypnos.engines.tool_dialects import ToolCall, ToolCallError


class EngineError(Exception):
    """The engine failed (weights refused, decode failure): a 500 server_error."""


class EngineUnavailable(EngineError):
    """The engine's library is not installed (a 503 naming the pip extra)."""

    def __init__(self, engine: str, extra: str):
        self.engine = engine
        self.extra = extra
        super().__init__(f"engine {engine} needs its library: pip install 'hypnos[{extra}]'")


class ContextOverflow(EngineError):
    """The prompt does not fit the context of a slot (a 422 context_over_budget)."""

    def __init__(self, message: str, prompt_tokens: int = 0, cap: int = 0):
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.cap = cap


@dataclass(frozen=True)
class LoadSpec:
    """What the scheduler asks an engine to build for tier 1.

    Paths are absolute and already checked to lie inside models_dir.
    """
    model_id: str
    weights_path: Path | None
    files: dict[str, Path] = field(default_factory=dict)   # config key -> path
    context_len: int = 4096          # across all slots
    slots: int = 1
    gpu_layers: int = -1             # -1 all; ignored on a CPU-only build
    cpu_expert_layers: int = 0
    chat_template: str | None = None
    threads: int | None = None
    options: dict = field(default_factory=dict)


@dataclass
class LoadReport:
    """What a load cost (tier_switch_phases in telemetry)."""
    load_mode: str = "mmap"           # mmap | read
    weights_ms: float = 0.0
    projector_ms: float = 0.0
    context_ms: float = 0.0
    total_ms: float = 0.0
    # With KV parking: the parked conversations restored after the load.
    kv_restore_ms: float | None = None
    kv_restored_tokens: int | None = None


class Engine(Protocol):
    """Lifecycle every engine shares. Construction is cheap and imports nothing heavy."""

    def load(self, spec: LoadSpec) -> LoadReport:
        """Build the engine (tier 1). Imports the heavy library here. Blocks."""

    def unload(self) -> None:
        """Free everything load() built. Idempotent. Blocks until freed."""


# ------------------------------------------------------------------------- chat

@dataclass(frozen=True)
class ChoiceGroup:
    """Choice ``index`` of the ``size`` choices of one request (``n`` > 1): the engine starts
    them together, in index order, so the same request runs the same batches every time."""
    key: str
    size: int
    index: int


@dataclass
class ChatRequest:
    messages: list[dict]
    max_tokens: int = 512
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    num_ctx: int | None = None
    tools: list[dict] | None = None
    presence_penalty: float | None = None     # OpenAI range -2..2; None/0 off
    frequency_penalty: float | None = None    # OpenAI range -2..2; None/0 off
    repetition_penalty: float | None = None   # llama.cpp's repeat penalty; None/1 off
    min_p: float | None = None                # 0..1; None/0 off
    grammar: str | None = None                # GBNF text, rule "root" (InvalidGrammar if bad)
    response_format: dict | None = None       # OpenAI's; the engine builds its grammar
    session_key: str | None = None            # binds the conversation to one slot
    tool_choice: str = "auto"                 # auto | none | required | a function's name
    stop: list[str] = field(default_factory=list)   # cut the answer before any of these
    logprobs: bool = False
    top_logprobs: int = 0                     # alternatives per token, 0..20
    logit_bias: dict[int, float] | None = None   # token id -> bias added to its logit
    think_budget: int | None = 0              # thinking tokens: 0 off, None unbounded
    repetition_bound: int = 0                 # stop a loop spanning this many tokens; 0 off
    prompt: str | None = None                 # a raw prompt (no template): /v1/completions
    media: list[bytes] = field(default_factory=list)   # images / audio, in marker order
    group: ChoiceGroup | None = None          # one of n choices (started together)


@dataclass
class TokenLogprob:
    token: str
    bytes: list[int]
    logprob: float
    top: list[tuple[str, list[int], float]] = field(default_factory=list)

    def to_wire(self) -> dict:
        return {"token": self.token, "logprob": self.logprob, "bytes": self.bytes,
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": b}
                                 for t, b, lp in self.top]}


@dataclass
class ChatDelta:
    """One step of a streamed answer: text for one part, or one whole tool call."""
    reasoning: str = ""
    content: str = ""
    tool_call: ToolCall | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass
class ChatTimings:
    queue_ms: float = 0.0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    ttft_ms: float = 0.0
    prefill_tokens_per_s: float = 0.0
    decode_tokens_per_s: float = 0.0
    cached_tokens: int = 0
    concurrent_slots: int = 1


@dataclass
class ChatResult:
    text: str                          # the answer's content (no thinking, no calls)
    finish_reason: str                 # stop | length | tool_calls | repetition_loop | cancelled
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    timings: ChatTimings = field(default_factory=ChatTimings)
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_errors: list[ToolCallError] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    kv_used: int = 0                   # tokens the slot holds after this answer
    kv_cap: int = 0                    # tokens a slot can hold
    #: How ``ChatRequest.response_format`` was applied (Pantheon's response_format_status).
    response_format_status: str | None = None


OnToken = Callable[[ChatDelta], None]


class ChatEngine(Engine, Protocol):
    def chat(self, req: ChatRequest, on_text: OnToken | None,
             cancel: threading.Event) -> ChatResult:
        """Generate one answer. ``on_text`` gets each ``ChatDelta`` (valid UTF-8, never a
        special token or a delimiter) as it is decoded, from the calling thread. Up to ``slots``
        calls may run at once from different threads; more block until a slot frees.
        Raises ContextOverflow when prompt + max_tokens cannot fit the context."""

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes (no special tokens added)."""


# ------------------------------------------------------------------- embeddings

@dataclass
class EmbedResult:
    vectors: list[list[float]]          # one per input, in input order
    prompt_tokens: int


class Embedder(Engine, Protocol):
    def embed(self, texts: list[str], cancel: threading.Event) -> EmbedResult:
        """Embed every text (batched inside). Raises ContextOverflow when one text is longer
        than the model accepts and cannot be truncated by the model's own rules."""


# ---------------------------------------------------------------- transcription

@dataclass
class Segment:
    start: float
    end: float
    text: str


@dataclass
class TranscribeRequest:
    audio: bytes                        # the uploaded file, any container PyAV decodes
    language: str | None = None
    prompt: str | None = None
    hotwords: list[str] = field(default_factory=list)
    filename: str | None = None


@dataclass
class TranscribeResult:
    text: str
    language: str | None
    duration_secs: float
    segments: list[Segment] = field(default_factory=list)
    processing_ms: float = 0.0


class AudioDecodeError(EngineError):
    """The audio could not be decoded (a 400)."""


class Transcriber(Engine, Protocol):
    def transcribe(self, req: TranscribeRequest, cancel: threading.Event) -> TranscribeResult:
        """Transcribe the whole file. Raises AudioDecodeError for undecodable input."""


# ----------------------------------------------------------------------- speech

@dataclass
class SpeechRequest:
    text: str
    voice: str = "alloy"
    speed: float = 1.0
    language: str = "en"


OnAudio = Callable[[bytes], None]      # 16-bit little-endian mono PCM at sample_rate


class Speaker(Engine, Protocol):
    sample_rate: int

    def synthesize(self, req: SpeechRequest, on_audio: OnAudio,
                   cancel: threading.Event) -> float:
        """Synthesize phrase by phrase, calling ``on_audio`` with each phrase's PCM (and the
        silence between phrases) as soon as it is ready. Returns the audio seconds made."""


# ------------------------------------------------------------- chat: sessions

class InvalidGrammar(EngineError):
    """ChatRequest.grammar is not valid GBNF (a 400)."""


class SessionMismatch(EngineError):
    """A session blob was made for other weights or a KV layout this model cannot take
    (a 409)."""


class SessionCorrupt(EngineError):
    """A session blob is not one: bad magic, unknown version, bad checksum, truncated
    (a 400)."""


class SessionCapacity(EngineError):
    """A new session key arrived while every slot is bound to one (a 429
    model_at_session_capacity)."""


class SessionNotFound(EngineError):
    """No slot is bound to that session key (a 404 session_not_found)."""


class SessionBusy(EngineError):
    """The session's slot is generating (or no unbound slot is free to import into): retry
    after the turn ends (a 429 session_busy)."""


class KVChatEngine(ChatEngine, Protocol):
    """A chat engine whose per-slot KV state can leave and come back (llama.cpp). All
    methods block; the KV copies run on the engine's decode thread between two steps."""

    max_sessions: int

    def park(self) -> object | None:
        """Copy every used slot's KV state and tokens to host memory (an object with
        ``slots``, ``tokens``, ``bytes``), or None when nothing is cached. Before unload."""

    def restore(self, parked: object) -> tuple[int, float]:
        """After load: (tokens restored, ms); (0, 0.0) when the layout or weights differ.
        ``parked`` is single use."""

    def export_session(self, slot_or_key: int | str) -> bytes:
        """A checksummed blob of one slot's conversation. Raises SessionNotFound,
        SessionBusy."""

    def import_session(self, blob: bytes, key: str) -> int:
        """Bind ``key`` to a slot holding the blob's conversation; returns its tokens.
        Raises SessionCorrupt, SessionMismatch, SessionCapacity, SessionBusy."""

    def release_session(self, key: str) -> bool:
        """Unbind ``key``; idempotent (False when it was not bound)."""


# ------------------------------------------------------------------- documents

class UnsupportedDocument(EngineError):
    """The document's format is not one the engine reads, or the file is corrupt (a 400)."""


class BadPageRange(UnsupportedDocument):
    """The requested pages are not in the document (a 400 naming ``pages``)."""


@dataclass
class DocumentRequest:
    data: bytes
    filename: str                       # its extension picks the format where bytes can't
    pages: tuple[int, int] | None = None   # 1-based inclusive range; None = all
    ocr: bool = True
    want_json: bool = False             # each page's docling document as a dict
    want_pictures: bool = False         # picture bytes (else only counted)


@dataclass
class DocumentPicture:
    page: int
    mime: str
    data: bytes | None                  # None when the engine has no bitmap for it
    width: int = 0
    height: int = 0
    dpi: int | None = None
    bbox: dict | None = None            # {l, t, r, b, coord_origin} in page units
    page_size: dict | None = None       # {width, height}
    caption: str | None = None
    ref: str | None = None


@dataclass
class ConvertedPage:
    page: int
    markdown: str
    pictures: list[DocumentPicture] = field(default_factory=list)
    tables: int = 0
    ms: float = 0.0
    json: dict | None = None


@dataclass
class OpenedDocument:
    """A document the engine accepted: what will be converted, and the engine's own state
    for it (``handle``, opaque to callers)."""
    format: str                         # pdf | docx | html | ...
    page_count: int                     # the source's pages (1 for formats without pages)
    pages: list[int]                    # the page numbers convert_pages will yield
    pipeline: str                       # native | layout | simple: which docling pipeline
    handle: object = None


OnPage = Callable[[ConvertedPage], None]


class Converter(Engine, Protocol):
    def open(self, req: DocumentRequest) -> OpenedDocument:
        """Detect the format and count pages. Raises UnsupportedDocument for an unknown
        format, a corrupt file or a page range outside the document. Blocks."""

    def convert_pages(self, doc: OpenedDocument, on_page: OnPage,
                      cancel: threading.Event) -> list[ConvertedPage]:
        """Convert ``doc.pages`` in order, calling ``on_page`` with each as soon as it is
        ready; ``cancel`` is checked between pages (a cancelled call returns the pages done).
        Raises EngineError when the conversion fails midway."""


# ------------------------------------------------------------- entity extraction

@dataclass
class Entity:
    text: str
    label: str
    start: int                          # [start, end) in Unicode code points
    end: int
    score: float


@dataclass
class ExtractRequest:
    texts: list[str]
    labels: list[str]
    threshold: float = 0.5
    flat: bool = True


@dataclass
class ExtractResult:
    entities: list[list[Entity]]        # one list per text, in text order, by start offset
    windows: int = 0                    # model passes over text windows, all families
    families: int = 0                   # label groups each window was run with


class Extractor(Engine, Protocol):
    def extract(self, req: ExtractRequest, cancel: threading.Event) -> ExtractResult:
        """Find the spans of every text that score at least ``threshold`` for a label.
        Long texts run in overlapping windows and many labels in families, transparently.
        ``cancel`` is checked between passes (a cancelled call returns what it found)."""


# ----------------------------------------------------------------------- images

@dataclass
class ImageRequest:
    prompt: str
    width: int
    height: int
    steps: int
    cfg_scale: float
    seed: int                           # image i is made with seed + i
    n: int = 1
    negative_prompt: str = ""
    sampler: str | None = None
    references: list[bytes] = field(default_factory=list)   # edits: encoded images


@dataclass
class GeneratedImage:
    png: bytes
    seed: int


class ImageGenerator(Engine, Protocol):
    def generate(self, req: ImageRequest, cancel: threading.Event) -> list[GeneratedImage]:
        """Make ``req.n`` PNG images, one at a time (``cancel`` is checked between them;
        a cancelled call returns the images made). With ``references`` the model edits or
        composes from them. Raises EngineError when the library fails."""
