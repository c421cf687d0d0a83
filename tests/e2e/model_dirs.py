"""A models folder for an e2e server, built from the lineup's real files: hard links (inside
models_dir, no copy), SmolLM2 with a Qwen3-style thinking template ("thinker.gguf"), and a
tiny random-weight vision projector ("tiny-mmproj.gguf", plumbing only)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MODELS_DIR, ROOT, require_smollm2
from tiny_mmproj import write_tiny_mmproj

sys.path.insert(0, str(ROOT / "bench"))
from harness import ServerProcess  # noqa: E402

QWEN = MODELS_DIR / "qwen2.5-coder-0.5b" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def models_dir(folder: Path, *, qwen: bool = False, smol: bool = False,
               thinker: bool = False, vision: bool = False) -> Path:
    """``folder`` filled with qwen.gguf, smol.gguf, thinker.gguf and tiny-mmproj.gguf as
    asked (it is created)."""
    folder.mkdir(parents=True, exist_ok=True)
    if qwen:
        if not QWEN.exists():
            pytest.fail(f"{QWEN} is missing: run `./run.sh models qwen2.5-coder:0.5b` first")
        os.link(QWEN, folder / "qwen.gguf")
    if smol or thinker:
        source = require_smollm2()
        if smol:
            os.link(source, folder / "smol.gguf")
        if thinker:
            subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata",
                            str(source), str(folder / "thinker.gguf"), "--chat-template-file",
                            str(ROOT / "tests" / "data" / "qwen3_style.jinja"), "--force"],
                           check=True, capture_output=True)
    if vision:
        write_tiny_mmproj(folder / "tiny-mmproj.gguf")
    return folder


def keyed_server(admin: str, **users: str) -> str:
    """A config's [server] block with one admin key and a user key per label (the
    two-tenant servers of the safety tests)."""
    lines = ["[server]", f'api_keys = ["{admin}"]']
    for label, key in users.items():
        lines += ["[[server.keys]]", f'label = "{label}"', f'key = "{key}"']
    return "\n".join(lines) + "\n"


def serve(tmp: Path, config: str, **files: bool) -> ServerProcess:
    """`hypnos serve` on ``config`` (TOML without models_dir) over a models folder made by
    ``models_dir(tmp / "models", **files)``."""
    models = models_dir(tmp / "models", **files)
    path = tmp / "hypnos.toml"
    path.write_text(f'models_dir = "{models}"\n' + config)
    # HYPNOS_MODELS_DIR (set by run.sh test) would win over the file's models_dir.
    return ServerProcess(path, tmp / "server.log", ready_timeout=180,
                         env={"HYPNOS_MODELS_DIR": str(models)})
