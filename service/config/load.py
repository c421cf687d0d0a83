"""Read a config file into the typed tree of `config_schema`, validate it, apply overrides.

Errors name the file and the dotted key: ``hypnos.toml: models[2].slots: must be >= 1, got 0``.
Read with tomllib; the overlay (``<name>.models.toml``) is written with tomlkit, atomically.
"""
from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from enum import Enum
from pathlib import Path

from hypnos.engines.chat_format import TOOL_FORMATS
from hypnos.engines.llama.speculative.choose import parse_spec
from hypnos.service.config.schema import (ENGINES, MODALITIES, PROFILES, Config, KeyConfig,
                                          ModelConfig, ServerConfig)


class ConfigError(ValueError):
    """A config file, block or override is invalid. ``problems`` lists every one found."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def _convert(value, tp, key: str, problems: list[str]):
    """Convert a TOML value to ``tp``; on failure record ``key: ...`` and return None."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(value, args[0], key, problems)
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{key}: must be a list, got {type(value).__name__}")
            return None
        (item_tp,) = typing.get_args(tp)
        return [_convert(v, item_tp, f"{key}[{i}]", problems) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            problems.append(f"{key}: must be a table, got {type(value).__name__}")
            return None
        return _build(tp, value, key, problems)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(m.value for m in tp)
            problems.append(f"{key}: must be one of {allowed}, got {value!r}")
            return None
    if tp is Path:
        if not isinstance(value, str):
            problems.append(f"{key}: must be a path string, got {type(value).__name__}")
            return None
        return Path(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, bool) or not isinstance(value, tp):
        problems.append(f"{key}: must be {_type_name(tp)}, got {value!r}")
        return None
    return value


def _build(cls, data: dict, prefix: str, problems: list[str]):
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in known or name == "source":
            problems.append(f"{key}: unknown setting")
            continue
        kwargs[name] = _convert(value, hints[name], key, problems)
    for name, f in known.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in kwargs:
            problems.append(f"{prefix + '.' if prefix else ''}{name}: required")
            kwargs[name] = None
    return cls(**kwargs)


def _check_range(problems, key, value, low=None, high=None):
    if value is None:
        return
    if low is not None and value < low:
        problems.append(f"{key}: must be >= {low}, got {value}")
    if high is not None and value > high:
        problems.append(f"{key}: must be <= {high}, got {value}")


def validate_model(m: ModelConfig, key: str, problems: list[str]) -> None:
    if m.id is not None and (not m.id or any(c.isspace() for c in m.id)):
        problems.append(f"{key}.id: must be a non-empty name without spaces, got {m.id!r}")
    for mod_key, mod in [(f"{key}.modality", m.modality)] + [
            (f"{key}.modalities[{i}]", x) for i, x in enumerate(m.modalities)]:
        if mod is not None and mod not in MODALITIES:
            problems.append(f"{mod_key}: must be one of {', '.join(MODALITIES)}, got {mod!r}")
    if m.engine is not None and m.engine not in ENGINES:
        problems.append(f"{key}.engine: must be one of {', '.join(ENGINES)}, got {m.engine!r}")
    if m.engine not in (None, "docling") and not m.weights_path:
        problems.append(f"{key}.weights_path: required for engine {m.engine}")
    _check_range(problems, f"{key}.slots", m.slots, 1, 64)
    _check_range(problems, f"{key}.context_len", m.context_len, 0, 1 << 22)
    _check_range(problems, f"{key}.min_gpu_layer_ratio", m.min_gpu_layer_ratio, 0.0, 1.0)
    for name in ("idle_demote_secs", "idle_evict_secs"):
        if getattr(m, name) < 0:
            problems.append(f"{key}.{name}: must be >= 0, got {getattr(m, name)}")
    _check_speculative(m, key, problems)
    if m.tool_format is not None and m.tool_format not in TOOL_FORMATS:
        problems.append(f"{key}.tool_format: must be one of {', '.join(TOOL_FORMATS)}, "
                        f"got {m.tool_format!r}")


def _check_speculative(m: ModelConfig, key: str, problems: list[str]) -> None:
    try:
        parse_spec(m.speculative)
    except ValueError as exc:
        problems.append(f"{key}.speculative: {exc}")


def validate_rpc_workers(cfg: Config, problems: list[str]) -> None:
    """Each worker endpoint is host:port, once, and (unless allow_public_rpc_workers) on
    loopback or a private network: RPC has no authentication."""
    from hypnos.engines.llama.rpc_probe import endpoint_problem
    _check_range(problems, "hardware.rpc_stall_secs", cfg.hardware.rpc_stall_secs, 1)
    seen: set[str] = set()
    for i, w in enumerate(cfg.hardware.rpc_workers):
        key = f"hardware.rpc_workers[{i}]"
        if w.endpoint is None:
            continue
        problem = endpoint_problem(w.endpoint, cfg.hardware.allow_public_rpc_workers)
        if problem:
            problems.append(f"{key}.endpoint: {problem}")
        if w.endpoint in seen:
            problems.append(f"{key}.endpoint: duplicate endpoint {w.endpoint!r}")
        seen.add(w.endpoint)
        _check_range(problems, f"{key}.memory_bytes", w.memory_bytes, 1)
        _check_range(problems, f"{key}.bandwidth_bytes_per_s", w.bandwidth_bytes_per_s, 1)


def validate_browser_lists(server: ServerConfig, problems: list[str]) -> None:
    """``server.allowed_hosts``: names or addresses (a port is ignored), or "*";
    ``server.allowed_origins``: ``scheme://host[:port]`` (``:*`` any port), "*" or "null"."""
    for i, host in enumerate(server.allowed_hosts):
        if not host.strip() or "/" in host or any(c.isspace() for c in host.strip()):
            problems.append(f"server.allowed_hosts[{i}]: must be a host name or address "
                            f"such as \"box.lan\" (no scheme, no path) or \"*\", got {host!r}")
    for i, origin in enumerate(server.allowed_origins):
        scheme, sep, rest = origin.strip().partition("://")
        if origin.strip() in ("*", "null"):
            continue
        if not (sep and scheme and rest) or "/" in rest.rstrip("/") or \
                any(c.isspace() for c in origin.strip()):
            problems.append(f"server.allowed_origins[{i}]: must be an origin such as "
                            f"\"http://box.lan:8080\" (scheme://host, an optional :port or "
                            f":*), \"*\" or \"null\", got {origin!r}")


def validate(cfg: Config, problems: list[str]) -> None:
    _check_range(problems, "server.port", cfg.server.port, 0, 65535)
    _check_range(problems, "server.request_log.capacity", cfg.server.request_log.capacity, 1)
    _check_range(problems, "server.shutdown_grace_secs", cfg.server.shutdown_grace_secs, 0)
    for name in ("stored_responses_max_count", "stored_responses_max_bytes",
                 "stored_responses_ttl_secs"):
        _check_range(problems, f"server.{name}", getattr(cfg.server, name), 0)
    if cfg.server.request_log.level not in ("off", "error", "warn", "info", "debug", "trace"):
        problems.append(f"server.request_log.level: unknown level {cfg.server.request_log.level!r}")
    for i, pattern in enumerate(cfg.server.request_log.redact):
        try:
            re.compile(pattern) if pattern != "*" else None
        except re.error as exc:
            problems.append(f"server.request_log.redact[{i}]: not a regular expression: {exc}")
    if cfg.server.profile is not None and cfg.server.profile not in PROFILES:
        problems.append(f"server.profile: must be one of {', '.join(PROFILES)}, "
                        f"got {cfg.server.profile!r}")
    if cfg.limits.overload not in ("queue", "shed"):
        problems.append(f"limits.overload: must be queue or shed, got {cfg.limits.overload!r}")
    for name in ("max_body_bytes", "max_audio_bytes", "max_image_bytes", "max_document_bytes",
                 "max_prompt_chars", "max_tokens_cap", "max_images_per_request",
                 "request_timeout_secs"):
        _check_range(problems, f"limits.{name}", getattr(cfg.limits, name), 1)
    _check_range(problems, "limits.max_queue_per_model", cfg.limits.max_queue_per_model, 0)
    _check_range(problems, "limits.repetition_loop_tokens", cfg.limits.repetition_loop_tokens, 0)
    _check_range(problems, "limits.swap_wait_ms", cfg.limits.swap_wait_ms, 0, 3_600_000)
    validate_rpc_workers(cfg, problems)
    validate_browser_lists(cfg.server, problems)
    seen: set[str] = set()
    for i, m in enumerate(cfg.models):
        validate_model(m, f"models[{i}]", problems)
        if m.id in seen:
            problems.append(f"models[{i}].id: duplicate id {m.id!r}")
        seen.add(m.id)
    names = {m.id for m in cfg.models}
    for i, m in enumerate(cfg.models):
        draft = m.speculative.get("draft") if isinstance(m.speculative, dict) else None
        if isinstance(draft, str) and (cfg.model(draft) is None or draft == m.id):
            problems.append(f"models[{i}].speculative.draft: {draft!r} is not another "
                            "configured model")
    for i, m in enumerate(cfg.models):
        for j, alias in enumerate(m.aliases):
            if not alias or alias in names:
                problems.append(f"models[{i}].aliases[{j}]: {alias!r} is empty or already "
                                "names a model")
            names.add(alias)


def resolve_model_file(models_dir: Path, rel: str) -> Path:
    """The real path of ``rel`` under ``models_dir``; ValueError when it leaves the folder
    (``..``, an absolute path elsewhere, or a symlink pointing out)."""
    root = models_dir.resolve()
    path = (root / rel).resolve()
    if path != root and root not in path.parents:
        raise ValueError(f"{rel!r} resolves outside models_dir ({root})")
    return path


def check_model_files(cfg: Config, m: ModelConfig, key: str, problems: list[str],
                      must_exist: bool = False) -> None:
    for cfg_key, rel in m.file_paths().items():
        try:
            path = resolve_model_file(cfg.models_dir, rel)
        except ValueError as exc:
            problems.append(f"{key}.{cfg_key}: {exc}")
            continue
        if must_exist and not path.exists():
            problems.append(f"{key}.{cfg_key}: {rel!r} is not in models_dir ({cfg.models_dir})")


def parse_config(data: dict, source: Path | None = None, base_dir: Path | None = None) -> Config:
    """Build and validate a Config from parsed TOML. Raises ConfigError."""
    problems: list[str] = []
    cfg = _build(Config, data, "", problems)
    if problems:
        raise ConfigError(problems)
    cfg.source = source
    if not cfg.models_dir.is_absolute():
        cfg.models_dir = (base_dir or Path.cwd()) / cfg.models_dir
    validate(cfg, problems)
    for i, m in enumerate(cfg.models):
        check_model_files(cfg, m, f"models[{i}]", problems)
    if problems:
        raise ConfigError(problems)
    return cfg


def parse_model_block(text: str) -> ModelConfig:
    """One ``[[models]]`` block (POST /v1/models {"config": ...}); raises ConfigError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"config: not valid TOML: {exc}"]) from None
    blocks = data.get("models")
    if not isinstance(blocks, list) or len(blocks) != 1 or set(data) != {"models"}:
        raise ConfigError(["config: must hold exactly one [[models]] block and nothing else"])
    problems: list[str] = []
    m = _convert(blocks[0], ModelConfig, "models[0]", problems)
    if not problems:
        validate_model(m, "models[0]", problems)
    if problems:
        raise ConfigError(problems)
    return m


def state_dir(cfg: Config, env: Mapping[str, str] | None = None) -> Path:
    """The folder of the server's durable state (stored responses), the one place it is
    resolved: ``server.state_dir`` (``~`` expanded; relative to the config file's folder, or
    to the working directory without a file), else ``hypnos-state`` beside the config file,
    else the user's data directory: ``$XDG_DATA_HOME/hypnos`` (an absolute XDG_DATA_HOME
    only, as the XDG spec says) or ``~/.local/share/hypnos``."""
    env = os.environ if env is None else env
    base = cfg.source.parent.absolute() if cfg.source is not None else None
    if cfg.server.state_dir:
        path = Path(cfg.server.state_dir).expanduser()
        return path if path.is_absolute() else (base or Path.cwd()) / path
    if base is not None:
        return base / "hypnos-state"
    data = env.get("XDG_DATA_HOME", "")
    root = Path(data) if data and Path(data).is_absolute() else \
        Path.home() / ".local" / "share"
    return root / "hypnos"


def overlay_path(config_path: Path) -> Path:
    """``hypnos.toml`` -> ``hypnos.models.toml`` beside it."""
    return config_path.with_name(config_path.stem + ".models.toml")


def load_config(path: Path | None, *, env: dict | None = None, port: int | None = None,
                host: str | None = None) -> Config:
    """Read ``path`` (None: defaults only), apply its overlay and the overrides.

    Order: file < overlay < HYPNOS_PORT / HYPNOS_API_KEYS / HYPNOS_USER_KEYS < --port / --host.
    HYPNOS_API_KEYS replaces server.api_keys (admin keys); HYPNOS_USER_KEYS adds user keys
    (``label=key`` or ``key``, comma-separated: no admin rights, no limits).
    Raises ConfigError with messages prefixed by the file name.
    """
    env = os.environ if env is None else env
    data: dict = {}
    if path is not None:
        data = _read_toml(path)
        ov = overlay_path(path)
        if ov.exists():
            data = apply_overlay(data, _read_toml(ov), ov.name)
    base = path.parent if path is not None else Path.cwd()
    try:
        cfg = parse_config(data, source=path, base_dir=base)
    except ConfigError as exc:
        name = path.name if path is not None else "config"
        raise ConfigError([f"{name}: {p}" for p in exc.problems]) from None
    if env.get("HYPNOS_PORT"):
        try:
            cfg.server.port = int(env["HYPNOS_PORT"])
        except ValueError:
            raise ConfigError([f"HYPNOS_PORT: must be a port number, got "
                               f"{env['HYPNOS_PORT']!r}"]) from None
    if env.get("HYPNOS_API_KEYS"):
        cfg.server.api_keys = [k.strip() for k in env["HYPNOS_API_KEYS"].split(",") if k.strip()]
    if env.get("HYPNOS_USER_KEYS"):
        cfg.server.keys += user_keys(env["HYPNOS_USER_KEYS"])
    if port is not None:
        cfg.server.port = port
    if host is not None:
        cfg.server.host = host
    return cfg


LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def user_keys(text: str) -> list[KeyConfig]:
    """HYPNOS_USER_KEYS: ``label=key`` or ``key`` entries, comma-separated. A label is
    letters, digits, ``_.-``; an entry whose text after the first ``=`` is empty or starts
    with ``=`` is a key alone (base64 padding)."""
    out = []
    for entry in (e.strip() for e in text.split(",")):
        label, sep, key = entry.partition("=")
        if sep and LABEL.fullmatch(label) and key and not key.startswith("="):
            out.append(KeyConfig(key=key, label=label))
        elif entry:
            out.append(KeyConfig(key=entry))
    return out


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: {exc.strerror}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path.name}: not valid TOML: {exc}"]) from None


def apply_overlay(data: dict, overlay: dict, name: str) -> dict:
    """The overlay holds ``[[models]]`` blocks (added or replacing by id) and
    ``removed = ["id", ...]``."""
    removed = set(overlay.get("removed", []))
    extra = overlay.get("models", [])
    if not isinstance(extra, list):
        raise ConfigError([f"{name}: models: must be an array of tables"])
    replaced = {m.get("id") for m in extra if isinstance(m, dict)}
    base = [m for m in data.get("models", []) if m.get("id") not in removed | replaced]
    return {**data, "models": base + extra}
