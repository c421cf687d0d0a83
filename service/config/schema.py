"""The typed configuration tree. Defaults live here, in code; a TOML file overrides them.

Every field carries its meaning in the comment above it. `service.config` reads a file into
this tree and validates it; nothing here does I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hypnos.planner.types import MoeOffload, Priority, Tier

MODALITIES = (
    "text_generation", "vision", "speech_to_text", "text_to_speech", "embeddings",
    "image_generation", "document_conversion", "entity_extraction", "rerank",
)
ENGINES = ("ggml_llama", "ggml_whisper", "faster_whisper", "ggml_diffusion", "onnx_runtime",
           "docling", "gliner")
# The config key each catalog file role fills (spec section 6, files[].role).
FILE_ROLES = {
    "weights": "weights_path",
    "aux": "aux_path",
    "text_encoder": "text_encoder_path",
    "tokenizer": "tokenizer_path",
    "voices": "voices_path",
}
PROFILES = {
    # name: (metric, target_ms or None)
    "voice_assistant": ("first_audio", 1500),
    "chat": ("first_token", 1000),
    "batch": ("throughput", None),
}


@dataclass
class KeyConfig:
    """One [[server.keys]] entry."""
    key: str
    # Shown in the request log and metrics instead of the key.
    label: str = ""
    # May change the model pool (POST/PUT/DELETE /v1/models).
    admin: bool = False
    requests_per_minute: int | None = None
    max_concurrent: int | None = None
    # Prompt plus completion tokens per UTC day.
    tokens_per_day: int | None = None


@dataclass
class TlsConfig:
    cert: str = ""
    key: str = ""


@dataclass
class RequestLogConfig:
    # Records kept in the ring buffer.
    capacity: int = 200
    # off | error | warn | info | debug | trace
    level: str = "info"
    # Regular expressions whose matches are blanked in captured text; "*" blanks all of it.
    redact: list[str] = field(default_factory=list)


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 9999
    # Plain keys; each is an admin key.
    api_keys: list[str] = field(default_factory=list)
    keys: list[KeyConfig] = field(default_factory=list)
    # Browser origins beyond loopback and the server's own that may call it (CORS, and any
    # request carrying an Origin header: others get 403); "http://host:*" wildcards the port,
    # "*" allows any origin, "null" sandboxed frames and file:// pages.
    allowed_origins: list[str] = field(default_factory=list)
    # Host header names beyond loopback and this machine's own names and addresses that the
    # server answers (others get 403: DNS rebinding); "*" answers any (behind a reverse proxy).
    allowed_hosts: list[str] = field(default_factory=list)
    # Folders whose files the /mcp tools may read by path on the server's side (an agent's
    # transcribe_audio or convert_document naming a file); symlinks are resolved and a path
    # with ".." or outside every folder is refused. Empty: no file is read by path.
    mcp_file_roots: list[str] = field(default_factory=list)
    # Where durable server state lives (stored responses' SQLite database, responses.db;
    # read at start). Empty: a "hypnos-state" folder beside the config file, or without one
    # $XDG_DATA_HOME/hypnos (~/.local/share/hypnos); relative: from the config file's folder.
    state_dir: str = ""
    tls: TlsConfig | None = None
    # Require an API key on /metrics.
    metrics_require_auth: bool = False
    # Workload profile: voice_assistant | chat | batch (sets the implicit objective).
    profile: str | None = None
    # Seconds a converted document's pictures stay in the picture store.
    document_pictures_ttl_secs: int = 3600
    # Bytes of pictures the picture store keeps; when full, the oldest documents go first.
    document_pictures_max_bytes: int = 512 * 1024**2
    # Stored /v1/responses turns (for GET and previous_response_id, in SQLite under state_dir)
    # kept at most; past it the least recently continued conversation's oldest turns go first
    # (0 keeps none).
    stored_responses_max_count: int = 1000
    # Bytes the stored /v1/responses may take (their JSON); past it the oldest go first.
    stored_responses_max_bytes: int = 64 * 1024**2
    # Seconds a stored /v1/responses conversation is kept after its newest turn (default 30
    # days, as OpenAI keeps responses; 0: no time limit).
    stored_responses_ttl_secs: int = 30 * 86400
    # Seconds after which an idle chat slot's KV cache is emptied (0: never).
    kv_idle_timeout_secs: int = 0
    request_log: RequestLogConfig = field(default_factory=RequestLogConfig)
    # Serve the playground web page at / (`hypnos serve --no-playground` turns it off).
    playground: bool = True
    # On SIGTERM: seconds the running requests get to finish before the server stops.
    shutdown_grace_secs: int = 30


@dataclass
class LimitsConfig:
    """Spec section 1; each default is the spec's."""
    max_body_bytes: int = 256 * 1024**2
    max_audio_bytes: int = 64 * 1024**2
    max_image_bytes: int = 32 * 1024**2
    max_document_bytes: int = 100 * 1024**2
    max_prompt_chars: int = 1_000_000
    # Most documents one POST /v1/rerank may score.
    max_rerank_documents: int = 1000
    max_tokens_cap: int = 8192
    max_images_per_request: int = 4
    request_timeout_secs: int = 900
    max_queue_per_model: int = 8
    allow_remote_image_urls: bool = True
    allow_private_urls: bool = False
    # queue | shed: with "shed", the profile's objective acts as an implicit deadline.
    overload: str = "queue"
    # Live transcription (GET /v1/audio/stream): longest session, longest silence from the
    # client, longest single utterance before it is cut and transcribed.
    live_max_session_secs: int = 600
    live_idle_timeout_secs: int = 30
    live_max_utterance_secs: int = 30
    # Realtime voice (GET /v1/realtime): sessions open at once (more are refused with 429),
    # the most audio one session's input buffer holds before it must be committed, and the
    # longest wait for a client event before the session is closed (not counted while an
    # answer or a transcription is being made).
    realtime_max_sessions: int = 4
    realtime_max_buffer_secs: int = 120
    realtime_idle_timeout_secs: int = 300
    # Stop a chat answer (finish_reason "repetition_loop") when its last this-many tokens are
    # one span repeated at least three times; 0 turns the check off.
    repetition_loop_tokens: int = 256
    # A request for a model that must evict busy models holds their new requests and waits
    # up to this long for the admitted ones to finish (grouped swaps, no thrash); past it 507.
    swap_wait_ms: int = 2000


@dataclass
class SimulateConfig:
    """Budget for another machine while the engines run on this one."""
    vram_bytes: int = 0
    ram_bytes: int = 0
    unified_memory: bool = False


@dataclass
class RpcWorkerConfig:
    """One [[hardware.rpc_workers]] entry: a llama.cpp rpc-server (`hypnos rpc-worker`) whose
    memory the planner may split a chat model's layers into when it does not fit here."""
    # host:port of the worker. Loopback or a private address unless
    # hardware.allow_public_rpc_workers: the RPC protocol has no authentication.
    endpoint: str
    # Bytes the planner may book on the worker; unset: what the worker reports free, less
    # 512 MiB for its own process.
    memory_bytes: int | None = None
    # Network bandwidth to the worker (bytes/s): the planner fills the fastest workers first.
    bandwidth_bytes_per_s: int = 1_250_000_000


@dataclass
class HardwareConfig:
    # Park KV state of chat slots when a model leaves tier 1 (on by default: the next turn of
    # a conversation then prefills only its new tokens). With prompt_cache on, parked slots go
    # into the prompt cache (kv_park_max_bytes is then unused: its RAM tier bounds them).
    kv_park: bool = True
    kv_park_max_bytes: int | None = None
    # Keep the prefixes chat slots lose to other conversations (their KV state) in host RAM
    # and in <server.state_dir>/prompt-cache, so a request with the same prefix (the same
    # API key, model file and tokens) prefills only the rest, after a model swap or a
    # restart too.
    prompt_cache: bool = True
    # Host RAM the prompt cache may hold, booked in tier 2. Unset: min(2 GiB, 1/16 of RAM).
    prompt_cache_ram_bytes: int | None = None
    # Disk the prompt cache's files may take (0: RAM only). Unset: 4 GiB.
    prompt_cache_disk_bytes: int | None = None
    # Entries unused this long are deleted (RAM and disk).
    prompt_cache_max_age_secs: int = 7 * 86400
    # Refuse loads (507 process_memory_cap) that would take the process above this, checked
    # against its measured resident memory; a move to tier 2 that would goes to tier 3.
    max_process_memory_bytes: int | None = None
    simulate: SimulateConfig | None = None
    # llama.cpp RPC workers a chat model too large for this machine is split across.
    rpc_workers: list[RpcWorkerConfig] = field(default_factory=list)
    # Accept rpc_workers endpoints that are not loopback or private addresses. The RPC
    # protocol has no authentication or encryption: anyone who reaches a worker can use it.
    allow_public_rpc_workers: bool = False
    # A split model whose decode makes no progress for this long while a request waits on
    # it (a worker hung, or gone without closing its connection) is ended as lost.
    rpc_stall_secs: int = 120


@dataclass
class ArchConfig:
    """[models.arch]: values left out are read from the GGUF at load."""
    architecture: str | None = None
    num_layers: int | None = None
    embedding_length: int | None = None
    head_count: int | None = None
    head_count_kv: int | None = None
    head_dim: int | None = None
    context_length: int | None = None
    expert_count: int | None = None
    expert_used_count: int | None = None


@dataclass
class ImageConfig:
    """[models.image]: defaults of the image routes for this model."""
    steps: int = 20
    cfg_scale: float = 3.0
    edit: bool = False
    sampler: str | None = None


@dataclass
class ModelConfig:
    """One [[models]] entry. Paths are relative to models_dir."""
    id: str
    modality: str
    engine: str
    # The main weights file or folder; docling runs without one (its layout model is optional).
    weights_path: str | None = None
    # Further modalities served besides the primary one.
    modalities: list[str] = field(default_factory=list)
    aux_path: str | None = None
    text_encoder_path: str | None = None
    tokenizer_path: str | None = None
    voices_path: str | None = None
    priority: Priority = Priority.NORMAL
    # Where the model is staged at startup; tier3 stages nothing.
    initial_tier: Tier = Tier.SSD
    # Execution slots (parallel sequences) of a text model.
    slots: int = 1
    # Context window funded across all slots; 0 = the model's trained context, capped at 8192.
    context_len: int = 0
    moe_offload: MoeOffload = MoeOffload.OFF
    # Refuse a GPU placement with fewer than this fraction of layers on the GPU.
    min_gpu_layer_ratio: float = 0.0
    # On demotion from tier 1 keep the weights in tier 2 instead of dropping to disk.
    keep_warm_in_ram: bool = True
    enabled: bool = True
    # Catalog variant this block came from (informational).
    quant: str | None = None
    # Chat template override (Jinja) for GGUFs that carry none.
    chat_template: str | None = None
    # Tool-call dialect: auto (read off the chat template), none (no tool calling: a request
    # with tools is a 400), or one of hermes, json, qwen3_coder, llama3, mistral, lfm, gemma,
    # glm, harmony.
    tool_format: str = "auto"
    # Other names the model answers to in every dialect ("claude-sonnet-4-5", "gpt-5"), for
    # clients that insist on a vendor's model name; /v1/models lists them.
    aliases: list[str] = field(default_factory=list)
    # Speculative decoding of a llama text model: "off", "ngram" (prompt lookup), "auto"
    # (prompt lookup where measurement says it pays, per kind of request) or a table
    # {draft = "<model id>", n_max = 4} (a draft model of the same vocabulary). A request's
    # own `prediction` (OpenAI Predicted Outputs) drafts whatever this says. A model with
    # recurrent layers never drafts. "auto" by default: on the fresh prompt set of
    # bench/speculative.py --fresh it cost at most 3 % where answers do not copy and gained
    # where they do (docs/speculative.md); "off" turns it off.
    speculative: object = "auto"
    # Seconds idle in tier 1 before the model is demoted to tier 2 (0: never; Ollama's
    # keep_alive sets the same per request).
    idle_demote_secs: float = 0
    # Seconds idle before the model is evicted to tier 3 (disk) from tier 1 or 2 (0: never).
    idle_evict_secs: float = 0
    arch: ArchConfig = field(default_factory=ArchConfig)
    image: ImageConfig | None = None

    @property
    def all_modalities(self) -> list[str]:
        return [self.modality] + [m for m in self.modalities if m != self.modality]

    def file_paths(self) -> dict[str, str]:
        """Config key -> relative path for every file this model names."""
        out = {}
        for key in FILE_ROLES.values():
            value = getattr(self, key)
            if value:
                out[key] = value
        return out


@dataclass
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    models_dir: Path = Path("models")
    models: list[ModelConfig] = field(default_factory=list)
    config_version: int = 1
    # The file this came from (None: built in code); the overlay sits next to it.
    source: Path | None = None

    def model(self, model_id: str) -> ModelConfig | None:
        return next((m for m in self.models if m.id == model_id), None)
