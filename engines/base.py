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


class EngineError(Exception):
    """The engine failed (weights refused, decode failure): a 500 server_error."""


class EngineUnavailable(EngineError):
    """The engine's library is not installed (a 503 naming the pip extra)."""

    def __init__(self, engine: str, extra: str):
        self.engine = engine
        self.extra = extra
        super().__init__(f"engine {engine} needs its library: pip install 'hypnos[{extra}]'")


class ContextOverflow(EngineError):
    """The prompt does not fit the allocated context (a 400)."""


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


class Engine(Protocol):
    """Lifecycle every engine shares. Construction is cheap and imports nothing heavy."""

    def load(self, spec: LoadSpec) -> LoadReport:
        """Build the engine (tier 1). Imports the heavy library here. Blocks."""

    def unload(self) -> None:
        """Free everything load() built. Idempotent. Blocks until freed."""


# ------------------------------------------------------------------------- chat

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
    text: str
    finish_reason: str                 # stop | length | cancelled
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    timings: ChatTimings = field(default_factory=ChatTimings)


OnToken = Callable[[str], None]


class ChatEngine(Engine, Protocol):
    def chat(self, req: ChatRequest, on_text: OnToken | None,
             cancel: threading.Event) -> ChatResult:
        """Generate one answer. ``on_text`` gets each new piece of visible text (valid UTF-8,
        never a special token) as it is decoded, from the calling thread. Up to ``slots``
        calls may run at once from different threads; more block until a slot frees.
        Raises ContextOverflow when prompt + max_tokens cannot fit the context."""

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes (no special tokens added)."""
