"""The service's import graph keeps its seams: scheduling knows nothing of HTTP (no module
under service/scheduling/ imports service/http/ or Sanic, directly or through another
module), and no two modules of service/ import each other in a circle (every import counts:
module level, under TYPE_CHECKING, inside a function)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    name = "hypnos." + ".".join(parts)
    return name.removesuffix(".__init__")


MODULES = {module_name(p): p for p in sorted(SERVICE.rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """Every module ``path`` names in an import statement (``from a import b``: a, and a.b
    when that is a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def service_graph() -> dict[str, set[str]]:
    return {name: (imported(path) & MODULES.keys()) - {name} for name, path in MODULES.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_service():
    assert len(MODULES) > 50
    assert circles(service_graph()) == []


def test_scheduling_imports_no_http_module_and_no_sanic():
    scheduling = {n: p for n, p in MODULES.items() if n.startswith("hypnos.service.scheduling")}
    assert "hypnos.service.scheduling.scheduler" in scheduling
    for name, path in scheduling.items():
        bad = {m for m in imported(path)
               if m.startswith("hypnos.service.http") or m.split(".")[0] == "sanic"}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_importing_all_of_scheduling_loads_neither_http_nor_sanic():
    """The same, through every module scheduling imports in turn (a fresh interpreter)."""
    names = sorted(n for n in MODULES if n.startswith("hypnos.service.scheduling"))
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sanic' "
            "or m.startswith('hypnos.service.http')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
