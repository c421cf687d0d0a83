"""Every config key with its type, default and meaning, read off service/config/schema.py:
the dataclass fields give the keys, types and defaults, the comment lines above a field give
its meaning. ``EXTRA_HELP`` covers the fields the schema leaves uncommented (a test checks that
every key has a meaning and that no entry here names a key that is gone)."""
from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path

from hypnos.service.config import schema as schema

EXTRA_HELP = {
    "server.host": "Address to bind (`hypnos serve --host`).",
    "server.port": "Port (`hypnos serve --port`, HYPNOS_PORT).",
    "server.keys": "API keys with a label, admin rights and per-key limits (spec section 2).",
    "server.keys.key": "The secret the client sends as `Authorization: Bearer <key>`.",
    "server.keys.requests_per_minute": "Requests per minute; past it 429 rate_limit_error.",
    "server.keys.max_concurrent": "Requests in flight at once (a stream counts until its "
                                  "last byte).",
    "server.tls": "Serve https with this certificate and key.",
    "server.tls.cert": "PEM certificate file.",
    "server.tls.key": "PEM private key file.",
    "server.request_log": "The request log's ring buffer (GET /v1/logs, `hypnos logs`).",
    "limits": "Request limits (spec section 1).",
    "limits.max_body_bytes": "Largest request body; past it 413.",
    "limits.max_audio_bytes": "Largest audio upload or base64 input_audio; past it 400.",
    "limits.max_image_bytes": "Largest image (data URL or download); past it 400.",
    "limits.max_document_bytes": "Largest document for /v1/documents/convert; past it 400.",
    "limits.max_prompt_chars": "Most characters of chat messages, embedding inputs or TTS "
                               "input; past it 400.",
    "limits.max_tokens_cap": "max_tokens is silently clamped to this.",
    "limits.max_images_per_request": "Most images one request may ask for (n); past it 400.",
    "limits.request_timeout_secs": "Seconds before the response headers; past it 408.",
    "limits.max_queue_per_model": "Requests queued or running per model; past it 429 "
                                  "model_busy.",
    "limits.allow_remote_image_urls": "Fetch http(s) image and document URLs (false: only "
                                      "data: URLs and uploads).",
    "limits.allow_private_urls": "Let those fetches reach loopback, private and link-local "
                                 "addresses.",
    "limits.live_idle_timeout_secs": "Live transcription: longest silence from the client.",
    "limits.live_max_utterance_secs": "Live transcription: longest utterance before it is "
                                      "cut and transcribed.",
    "limits.realtime_max_buffer_secs": "Realtime voice: most audio one input buffer holds "
                                       "before it must be committed.",
    "limits.realtime_idle_timeout_secs": "Realtime voice: longest wait for a client event "
                                         "before the session is closed (not counted while "
                                         "an answer or a transcription is being made).",
    "hardware": "Memory tiers and machine overrides.",
    "hardware.kv_park_max_bytes": "Host memory the parked KV states may hold; the least "
                                  "recently parked go first. Unset: 4 GiB, at most an "
                                  "eighth of the (simulated) RAM. Unused with "
                                  "hardware.prompt_cache on: parking then goes into the "
                                  "prompt cache, within its RAM tier.",
    "hardware.prompt_cache_ram_bytes": "Host RAM the prompt cache may hold, booked in tier "
                                       "2. Unset: 2 GiB, at most a sixteenth of the "
                                       "(simulated) RAM.",
    "hardware.prompt_cache_disk_bytes": "Disk the prompt cache's files may take under "
                                        "<server.state_dir>/prompt-cache (0: RAM only). "
                                        "Unset: 4 GiB.",
    "hardware.simulate": "Plan for another machine's memory while the engines run here.",
    "hardware.simulate.vram_bytes": "Simulated GPU memory.",
    "hardware.simulate.ram_bytes": "Simulated host memory.",
    "hardware.simulate.unified_memory": "Simulate unified memory (Apple Silicon).",
    "server": "The HTTP server.",
    "models_dir": "Folder the models' paths are relative to (HYPNOS_MODELS_DIR overrides it).",
    "models": "The model pool: one [[models]] block per model.",
    "config_version": "Version of this file's layout.",
    "models.id": "The name clients ask for (the `model` field of a request).",
    "models.modality": "Primary modality: " + ", ".join(schema.MODALITIES) + ".",
    "models.engine": "Engine: " + ", ".join(schema.ENGINES) + ".",
    "models.aux_path": "Projector (mmproj) or VAE file.",
    "models.text_encoder_path": "Text encoder of an image model.",
    "models.tokenizer_path": "Tokenizer file (embeddings, entity extraction).",
    "models.voices_path": "Voices file of a speech model.",
    "models.priority": "Eviction order: lower priorities leave tier 1 first; realtime_pinned "
                       "is never evicted.",
    "models.moe_offload": "Mixture-of-Experts expert tensors on the CPU: off, auto (only when "
                          "the model does not fit the GPU whole) or on.",
    "models.enabled": "In service (false: hidden, requests get 404 model_disabled).",
    "models.arch": "Architecture values; those left out are read from the GGUF at load.",
    "models.arch.architecture": "GGUF general.architecture.",
    "models.arch.num_layers": "Transformer blocks.",
    "models.arch.embedding_length": "Hidden size.",
    "models.arch.head_count": "Attention heads.",
    "models.arch.head_count_kv": "Key/value heads (grouped-query attention).",
    "models.arch.head_dim": "Size of one attention head.",
    "models.arch.context_length": "Trained context window.",
    "models.arch.expert_count": "Experts per Mixture-of-Experts layer (0: dense).",
    "models.arch.expert_used_count": "Experts used per token.",
    "models.image": "Defaults of the image routes for this model.",
    "models.image.steps": "Diffusion steps.",
    "models.image.cfg_scale": "Classifier-free guidance scale.",
    "models.image.edit": "The model can edit images (/v1/images/edits).",
    "models.image.sampler": "Sampler name (default: the engine's).",
}


@dataclass(frozen=True)
class Key:
    path: str          # dotted, e.g. "server.request_log.level"
    type: str          # as written in the schema
    default: str       # TOML-ish, "" when required or a table
    help: str
    table: bool        # a [table] or [[array of tables]] rather than a value


def _comments(cls) -> dict[str, str]:
    """Field name -> the comment lines directly above it in the class body."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    out = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above, i = [], node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#"):
                above.insert(0, lines[i].strip().lstrip("#").strip())
                i -= 1
            if above:
                out[node.target.id] = " ".join(above)
    return out


def _nested(tp) -> tuple[type | None, bool]:
    """(the dataclass a field holds, whether it is a list of them)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list and args and dataclasses.is_dataclass(args[0]):
        return args[0], True
    for candidate in (tp, *args):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate, False
    return None, False


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    if dataclasses.is_dataclass(value):
        return ""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, Path)):
        return f'"{value}"'
    return repr(value)


def config_keys(cls=schema.Config, prefix: str = "") -> list[Key]:
    """Every key of the config file, depth first, in the schema's order."""
    hints = typing.get_type_hints(cls)
    comments = _comments(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "source":          # where the file came from, not a key in it
            continue
        path = prefix + f.name
        inner, many = _nested(hints[f.name])
        help_text = comments.get(f.name) or EXTRA_HELP.get(path, "")
        if inner is not None and not help_text and inner.__doc__ and \
                not inner.__doc__.startswith(inner.__name__ + "("):
            help_text = inner.__doc__.strip().split("\n")[0]
        hint = hints[f.name]
        if inner is not None:
            type_name = f"[[{path}]]" if many else f"[{path}]"
        elif isinstance(hint, type) and issubclass(hint, enum.Enum):
            type_name = " | ".join(f'"{m.value}"' for m in hint)
        else:
            type_name = str(f.type)
        out.append(Key(path, type_name, _default(f), help_text, inner is not None))
        if inner is not None:
            out += config_keys(inner, path + ".")
    return out
