"""Every error an engine raises: ``EngineError`` and its subclasses.

Engines raise these, never bare library exceptions; the service maps each to its HTTP status
(noted on each class). Pure: importing this module imports no engine library.
"""
from __future__ import annotations


class EngineError(Exception):
    """The engine failed (weights refused, decode failure): a 500 server_error."""


class EngineUnavailable(EngineError):
    """The engine's library is not installed (a 503 naming the pip extra)."""

    def __init__(self, engine: str, extra: str):
        self.engine = engine
        self.extra = extra
        super().__init__(f"engine {engine} needs its library: pip install 'hypnos[{extra}]'")


class EngineNotBuilt(EngineUnavailable):
    """The engine kind is valid but this version of Hypnos has no implementation of it.
    ``extra`` is the pip extra of a planned engine ("" when none is planned)."""

    def __init__(self, kind: str, modality: str | None = None, extra: str = ""):
        self.engine = kind
        self.extra = extra
        what = f"engine {kind}" + (f" for {modality}" if modality else "")
        Exception.__init__(self, f"{what} is not implemented in this version of Hypnos")


class MtpUnavailable(EngineUnavailable):
    """``speculative = "mtp"`` on a model that cannot draft with MTP heads: its GGUF has no
    nextn layers, or a separate head does not fit it (a 503 naming the model; refused at
    load)."""

    def __init__(self, message: str):
        self.engine, self.extra = "ggml_llama", ""
        Exception.__init__(self, message)


class ContextOverflow(EngineError):
    """The prompt does not fit the context of a slot (a 422 context_over_budget)."""

    def __init__(self, message: str, prompt_tokens: int = 0, cap: int = 0):
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.cap = cap


class WorkerLost(EngineError):
    """An RPC worker holding some of the model's layers stopped answering: the request ends
    (a 503 model_not_available naming the worker) and the model is demoted."""


# ------------------------------------------------------------------------ chat

class NoChatTemplate(EngineError):
    """A chat request to a model whose GGUF carries no chat template and whose config sets
    none (a base model): a 400 on ``messages``; ``/v1/completions`` still serves it."""


class InvalidGrammar(EngineError):
    """ChatRequest.grammar is not valid GBNF (a 400)."""


class MediaDecodeError(EngineError):
    """A media item could not be used: undecodable bytes, a modality the projector lacks,
    or a marker count that differs from the number of items. A client error (400).
    ``index`` is the failing item's position in ``media`` (None: the request as a whole)."""

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


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


# ------------------------------------------------------------------- audio, documents

class AudioDecodeError(EngineError):
    """The audio could not be decoded (a 400)."""


class UnsupportedDocument(EngineError):
    """The document's format is not one the engine reads, or the file is corrupt (a 400
    naming ``param``)."""
    param = "file"


class BadPageRange(UnsupportedDocument):
    """The requested pages are not in the document (a 400 naming ``pages``)."""
    param = "pages"


class OcrUnavailable(UnsupportedDocument):
    """The document needs OCR this server cannot do, or ``ocr`` forbids the only way to read
    it (a 400 naming ``ocr``)."""
    param = "ocr"
