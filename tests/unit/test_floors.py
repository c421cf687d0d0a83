"""The floors of service/ (docs/architecture.md, "Floors"): each folder, and each module at
its top, stands on one floor, and a module imports only from its own floor or the floors
below it. Every import counts: module level, under TYPE_CHECKING, inside a function. A new
folder or top-level module of service/ fails here until it is given its floor.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"

# Lowest first. What each floor holds, and why it stands where it does:
FLOORS = (
    "config",       # settings: schema, loading, overlays (no other floor)
    "refusals",     # what the scheduler refuses, as typed values
    "errors",       # the HTTP errors, and the one map from engine errors and refusals
    "wire",         # dialects as typed values: body reading, parsers, renderers (no app)
    "keys",         # API keys, limits, quotas (a store)
    "media",        # fetching and decoding what requests carry (media parts, audio)
    "scheduling",   # the scheduler, and the stores beside it: keep_alive, readiness, turns
    "observe",      # a request's record, metrics, telemetry, the request log, workflows
    "inference",    # checked, leased engine calls, with narrow dependencies (Caller)
    "state",        # AppState: every store above, held by the app
    "lifecycle",    # staging, config watch, the catalog pool, shutdown
    "mcp",          # the pool as MCP tools: tool logic over inference/, the SDK's server
    "http",         # Sanic layers, the route's Caller, the turn's sink, OpenAPI, browser safety
    "routes",       # one module per route family
    "app",          # create_app: builds the state, installs layers and routes
)
RANK = {name: i for i, name in enumerate(FLOORS)}


def floor_of(parts: tuple[str, ...]) -> str | None:
    """The floor of the module ``hypnos.service.<parts>`` (a folder's name, or the stem of a
    module at service/'s top); None for the package itself."""
    return parts[0] if parts else None


def imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every hypnos.service module ``source`` imports; ``from a import b``
    counts as a.b (b may be a module: ``from hypnos.service import errors``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "hypnos.service":
                found += [(node.lineno, f"hypnos.service.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, m) for line, m in found if m.startswith("hypnos.service.")]


def climbs(path: str, parts: tuple[str, ...], source: str) -> list[str]:
    """Each import of ``source`` (the module service/<parts>, shown as ``path``) that goes up
    the floors, as ``path:line: ...``."""
    here = floor_of(parts)
    assert here in RANK, f"{path}: service/{here} has no floor; add it to FLOORS"
    out = []
    for line, module in imports(source):
        there = floor_of(tuple(module.split(".")[2:]))
        if there is None or there == here:
            continue
        assert there in RANK, f"{path}:{line}: imports {module}, whose floor is unknown"
        if RANK[there] > RANK[here]:
            out.append(f"{path}:{line}: imports {module}: {here} (floor {RANK[here]}) may "
                       f"not import {there} (floor {RANK[there]}), which stands above it")
    return out


def service_modules() -> list[Path]:
    return sorted(p for p in SERVICE.rglob("*.py") if p.name != "__init__.py" or
                  p.parent != SERVICE)


def test_the_checker_refuses_an_import_up_and_allows_one_down():
    up = "import os\nfrom hypnos.service.routes.chat import chat\n"
    assert climbs("service/wire/x.py", ("wire", "x"), up) == [
        "service/wire/x.py:2: imports hypnos.service.routes.chat: wire (floor 3) may not "
        "import routes (floor 13), which stands above it"]
    # Through the package, under TYPE_CHECKING, inside a function: each counts.
    sneaky = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from hypnos.service import state\n"
              "def f():\n    import hypnos.service.http.layers\n")
    assert [m.split(": ")[1] for m in climbs("service/inference/x.py", ("inference", "x"),
                                            sneaky)] == [
        "imports hypnos.service.state", "imports hypnos.service.http.layers"]
    down = ("from hypnos.service import errors\nfrom hypnos.service.config.schema import C\n"
            "from hypnos.service.wire.body import json_body\n")
    assert climbs("service/routes/x.py", ("routes", "x"), down) == []
    assert climbs("service/state.py", ("state",), down) == []


def test_a_module_without_a_floor_is_refused():
    with pytest.raises(AssertionError, match="has no floor"):
        climbs("service/attic/x.py", ("attic", "x"), "")


def test_no_import_goes_up_the_floors():
    modules = service_modules()
    assert len(modules) > 50
    problems = []
    for path in modules:
        parts = path.relative_to(SERVICE).with_suffix("").parts
        problems += climbs(str(path.relative_to(ROOT)), parts, path.read_text())
    assert not problems, "imports up the floors (docs/architecture.md, Floors):\n" + \
        "\n".join(problems)


def test_every_floor_is_there():
    """The order names what service/ holds: no floor left behind by a move."""
    present = {p.relative_to(SERVICE).parts[0] for p in service_modules()}
    assert {name.removesuffix(".py") for name in present} == set(FLOORS)
