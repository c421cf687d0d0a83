"""Issue 37's acceptance for the chat routes: a route is decode -> turn. No route module
reaches past the one chat turn (`inference.turn`) to the engine plumbing it owns
(``stream_choices``, ``run_choices``, ``text_lease``), and each chat route module stays under
about 150 lines."""
import ast
from pathlib import Path

ROUTES = Path(__file__).resolve().parents[2] / "service" / "routes"
TURN_INTERNALS = {"stream_choices", "run_choices", "text_lease"}
CHAT_ROUTES = ("chat", "completions", "messages", "responses", "ollama")


def imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute) and node.attr in TURN_INTERNALS:
            names.add(node.attr)         # text.stream_choices through a module import
    return names


def test_no_route_imports_what_the_turn_owns():
    modules = sorted(ROUTES.glob("*.py"))
    assert len(modules) > len(CHAT_ROUTES)
    offenders = {p.name: sorted(imported_names(p) & TURN_INTERNALS) for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_each_chat_route_stays_small():
    sizes = {name: len((ROUTES / f"{name}.py").read_text().splitlines())
             for name in CHAT_ROUTES}
    assert all(n < 150 for n in sizes.values()), sizes
