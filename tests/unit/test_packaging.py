"""Packaging: every package folder is listed, and the CLI starts without engine libraries."""
import json
import subprocess
import sys
import tomllib

from conftest import ROOT

HEAVY = ("llama_cpp", "torch", "onnxruntime", "docling", "faster_whisper", "gliner",
         "ctranslate2", "kokoro_onnx", "stable_diffusion_cpp")


def _package_folder(package: str, dirs: dict[str, str]) -> str:
    """The folder setuptools takes ``package`` from: its own package-dir entry, else its
    nearest listed parent's folder and the rest of its dotted name (a subpackage)."""
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        parent = ".".join(parts[:i])
        if parent in dirs:
            return "/".join([dirs[parent], *parts[i:]])
    raise AssertionError(f"{package} has no package-dir entry, nor has any parent")


def test_every_package_folder_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = cfg["package-dir"]
    listed = {_package_folder(p, dirs) for p in cfg["packages"]}
    assert set(dirs) <= set(cfg["packages"])
    # Only subpackages (a listed parent) may go without their own package-dir entry.
    assert all(p in dirs or p.rsplit(".", 1)[0] in cfg["packages"] for p in cfg["packages"])
    on_disk = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("**/__init__.py")
               if ".venv" not in p.parts and "tests" not in p.parts and "build" not in p.parts}
    assert on_disk == listed, f"folders with __init__.py not in pyproject: {on_disk - listed}"


def test_the_data_folders_ship_through_package_data_globs():
    """include-package-data is off (on, setuptools warns a screen per data folder that it
    looks like an unlisted package), so package-data's globs alone ship the data files."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["include-package-data"] is False
    shipped = {path for pkg, globs in cfg["package-data"].items() for g in globs
               for path in (ROOT / cfg["package-dir"][pkg]).glob(g) if path.is_file()}
    data = [p for d in ("service/examples", "service/playground") for p in (ROOT / d).iterdir()]
    data += list((ROOT / "catalog").glob("*.toml"))
    assert data and not [str(p.relative_to(ROOT)) for p in data if p not in shipped]


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_cli_help_and_advise_import_no_engine_library():
    code = """
from click.testing import CliRunner
from hypnos.cli.main import cli
r = CliRunner().invoke(cli, ["--help"]); assert r.exit_code == 0, r.output
r = CliRunner().invoke(cli, ["advise", "--needs", "chat", "--vram", "24G", "--ram", "64G",
                            "--json"])
assert r.exit_code == 0, r.output
"""
    loaded = _modules_after(code)
    assert not [m for m in HEAVY if m in loaded]


def test_no_bare_top_level_package_names_installed():
    """`import service` must not work: only hypnos.service is installed."""
    proc = subprocess.run([sys.executable, "-c", "import service"], capture_output=True,
                          cwd="/")
    assert proc.returncode != 0


def test_python_dash_m_entry_point():
    proc = subprocess.run([sys.executable, "-m", "hypnos.cli", "--version"],
                          capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0 and "hypnos" in proc.stdout


def test_the_http_parsers_import_no_engine_library():
    """A server without the llama extra answers a chat request with response_format (or
    tools) from its parsers; only the engine builds grammars (regression: a 500,
    ModuleNotFoundError llama_cpp, while the parser built the GBNF)."""
    code = """
from hypnos.service.wire.chat import parse_chat
from hypnos.service.config.schema import LimitsConfig
import hypnos.service.routes.chat, hypnos.service.routes.completions
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                            "schema": {"type": "object"}}},
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"}
params = parse_chat(body, LimitsConfig())
assert params.request.response_format["type"] == "json_schema"
"""
    loaded = _modules_after(code)
    assert not [m for m in HEAVY if m in loaded]


def test_the_chat_format_package_and_the_registry_import_no_engine_library():
    """``hypnos.engines.chat_format`` (every module of it) is pure string work, and the
    registry answers ``capabilities`` without importing any engine library."""
    code = """
import hypnos.engines.chat_format
import hypnos.engines.chat_format.grammar, hypnos.engines.chat_format.stream
import hypnos.engines.chat_format.detect, hypnos.engines.chat_format.markup_dialects
import hypnos.engines.protocols, hypnos.engines.records, hypnos.engines.errors
from hypnos.engines.registry import ENGINES, capabilities
for kind, modality in ENGINES:
    assert capabilities(kind, modality)
"""
    loaded = _modules_after(code)
    assert not [m for m in HEAVY if m in loaded]
    assert "llama_cpp" not in loaded
