"""The plain records engines and the service exchange: what is asked of an engine (requests,
``LoadSpec``) and what it answers (results, reports, deltas), plus the callback types.

Pure dataclasses: importing this module imports no engine library and no engine module.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable


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


# ------------------------------------------------------------------------- chat

@dataclass
class ToolCall:
    name: str
    arguments: str                      # a JSON object serialised as a string


@dataclass
class ToolCallError:
    """A call the model started but that did not parse (Pantheon's ``tool_call_error``)."""
    code: str                           # unparseable_call | unknown_function
    message: str
    function: str | None = None

    def to_wire(self) -> dict:
        out = {"code": self.code, "message": self.message}
        if self.function:
            out["function"] = self.function
        return out


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
    #: The binding gives way (to a new session, when every slot is bound and this one is
    #: the least recently used idle one) instead of refusing it: a client's cache hint.
    session_yields: bool = False
    #: The conversation the prompt continues, without binding a slot (a stored Responses
    #: conversation that cannot have one): its prefix is kept in the prompt cache under
    #: this session, so releasing it or deleting the stored response drops it.
    cache_tag: str | None = None
    #: Indices of messages that end a prefix the client marked for caching (Anthropic's
    #: cache_control; the instructions before a prompt_cache_key's conversation): a model
    #: that takes checkpoints (hybrid, recurrent) takes one where each ends.
    cache_marks: tuple[int, ...] = ()
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
    #: OpenAI Predicted Outputs: the text the answer is expected to repeat (a draft).
    prediction: str | None = None
    #: Whose cached prefixes and recent answers this request may reuse: the key's owner id
    #: (set by the service), "" for one shared partition (keys off). A slot's KV or an answer
    #: of another partition is never matched, so nothing reported depends on its text.
    partition: str = ""
    #: While set, the answer takes no decode step (its slot keeps its place and its KV): a
    #: realtime answer pauses its chat model this way while the speech model, on the same
    #: CPU cores, speaks a finished sentence. None: never paused.
    pause: threading.Event | None = None


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
    #: Of completion_tokens, those generated inside the thinking block (its delimiters too).
    reasoning_tokens: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_errors: list[ToolCallError] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    kv_used: int = 0                   # tokens the slot holds after this answer
    kv_cap: int = 0                    # tokens a slot can hold
    #: How ``ChatRequest.response_format`` was applied (Pantheon's response_format_status).
    response_format_status: str | None = None
    #: The stop string that ended the answer (finish_reason "stop"), if one did.
    stop_sequence: str | None = None
    #: A forced call the engine closed itself (the tokens left reached what closing it
    #: takes): its last arguments are the shortest valid ones, not the model's.
    tool_call_truncated: bool = False
    #: Speculative decoding, when it ran: {method, drafted, accepted, n_max}.
    speculative: dict | None = None
    #: Where ``cached_tokens`` came from, for an engine with a prompt cache: {"slot": n,
    #: "ram": n, "disk": n} (the slot's own KV, the cache's RAM and disk tiers).
    cached_from: dict[str, int] | None = None
    #: Where the prompt parted from the best prefix its key had cached (a slot or the
    #: prompt cache): {best_cached_prefix, parted_at (None: nothing parted), before, prompt,
    #: cached} (``engines/llama/parting``); None when the key had nothing cached.
    parting: dict | None = None


OnToken = Callable[[ChatDelta], None]


# ---------------------------------------------------------------------------- embeddings

@dataclass
class EmbedResult:
    vectors: list[list[float]]          # one per input, in input order
    prompt_tokens: int


# ---------------------------------------------------------------------------- rerank

@dataclass
class RerankRequest:
    """One query against documents (``Reranker.rerank``)."""
    query: str
    documents: list[str]
    #: What relevance means, for a chat model judging (the Qwen3-Reranker "Instruct" line);
    #: None: a generic search instruction. A reranker GGUF ignores it.
    instruction: str | None = None


@dataclass
class RerankResult:
    scores: list[float]                 # one per document, in input order (higher: closer)
    prompt_tokens: int                  # tokens evaluated, the shared prefix counted once


# ------------------------------------------------------------------------- transcription

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
    # Whether the caller reads the segments' start and end. Without them, a short clip is
    # read in a short window (engines/whisper.py), whose timestamps are not the speech's.
    timestamps: bool = True


@dataclass
class TranscribeResult:
    text: str
    language: str | None
    duration_secs: float
    segments: list[Segment] = field(default_factory=list)
    processing_ms: float = 0.0


# -------------------------------------------------------------------------------- speech

@dataclass
class SpeechRequest:
    text: str
    voice: str = "alloy"
    speed: float = 1.0
    language: str = "en"


OnAudio = Callable[[bytes], None]      # 16-bit little-endian mono PCM at sample_rate


# ----------------------------------------------------------------------------- documents

@dataclass
class DocumentRequest:
    data: bytes
    filename: str                       # its extension picks the format where bytes can't
    pages: tuple[int, int] | None = None   # 1-based inclusive range; None = all
    ocr: str = "auto"                   # auto (pages with no text layer) | on (every page) | off
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
    ocr: bool = False                   # the page's text came from OCR


@dataclass
class OpenedDocument:
    """A document the engine accepted: what will be converted, and the engine's own state
    for it (``handle``, opaque to callers)."""
    format: str                         # pdf | docx | html | ...
    page_count: int                     # the source's pages (1 for formats without pages)
    pages: list[int]                    # the page numbers convert_pages will yield
    pipeline: str                       # native | layout | simple: which docling pipeline
    handle: object = None
    layout_model: bool = False          # docling's layout model is loaded
    ocr_engine: str | None = None       # the OCR engine pages may go through (None: none here)
    warning: str | None = None          # what this conversion cannot do here, for people


OnPage = Callable[[ConvertedPage], None]


# --------------------------------------------------------------------- entity extraction

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


# -------------------------------------------------------------------------------- images

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
