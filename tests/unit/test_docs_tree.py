"""The documents: docs/api.md covers every route the app registers and every error type, its
rendering of schemas is right on hand-written cases, docs/cli.md every command, the README
stays short and names the default lineup, and every relative link in the documents lands on
a file (and a heading or anchor there). Model-free."""
import re
import subprocess
from pathlib import Path

from conftest import ROOT
from hypnos.catalog.catalog import load_catalog
from hypnos.cli import api_doc
from hypnos.cli.gen_docs import _commands
from hypnos.cli.main import cli
from hypnos.service.app import create_app
from hypnos.service.config.schema import Config

API = ROOT / "docs" / "api.md"
README_MAX_LINES = 150


def registered_routes() -> set[tuple[str, str]]:
    """(METHOD, /path/{param}) of every route the app's router holds, read off the router
    itself (not the OpenAPI document the reference is generated from)."""
    app = create_app(Config(), stage=False, builds={})
    app.router.finalize()
    out = set()
    for route in app.router.routes:
        path = "/" + re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", route.path).lstrip("/")
        out |= {(m, path) for m in route.methods - {"HEAD", "OPTIONS"}}
    return out


def test_every_registered_route_has_its_section_in_api_md():
    text = API.read_text()
    routes = registered_routes()
    missing = sorted(r for r in routes if f"#### `{r[0]} {r[1]}`\n" not in text)
    assert not missing, f"not in docs/api.md (python -m hypnos.cli.gen_docs): {missing}"
    assert len(routes) >= 30
    sections = re.findall(r"^#### `(\w+) (\S+)`$", text, re.M)
    assert len(sections) == len(set(sections)) == len(routes)


def test_every_error_type_is_documented_with_its_meaning():
    types = api_doc.error_types()
    undocumented = [t for t in types if t not in api_doc.ERROR_MEANINGS]
    assert not undocumented, f"add their meaning to cli/api_doc.py ERROR_MEANINGS: {undocumented}"
    text = API.read_text()
    for status, type_ in types:
        assert f"| {status} | `{type_}` | " in text
    assert (404, "model_not_found") in types and (429, "rate_limit_error") in types


CALL = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
MESSAGE = {"oneOf": [
    {"type": "object", "required": ["role", "content"], "properties": {
        "role": {"const": "user"}, "content": {"type": "string", "maxLength": 9}}},
    {"type": "object", "required": ["role"], "description": "``content`` may be null.",
     "anyOf": [{"required": ["content"]}, {"properties": {"calls": {"minItems": 1}}}],
     "properties": {"role": {"const": "assistant"}, "content": {"type": ["string", "null"]},
                    "calls": {"type": "array", "items": CALL}}}]}
BODY = {"type": "object", "required": ["model", "messages"], "properties": {
    "model": {"type": "string", "minLength": 1},
    "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 8, "default": 1},
    "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                            "maxItems": 4}, {"type": "null"}]},
    "mode": {"enum": ["off", "on", None]}}}


def test_fields_are_flattened_with_their_forms_types_and_limits():
    rows = {r.path: r for r in api_doc.field_rows(BODY)}
    assert list(rows) == ["model", "messages", "messages[].role", "messages[].content",
                          "messages[].calls", "messages[].calls[].name", "n", "stop", "mode"]
    assert rows["model"].required and rows["model"].notes == ["length ≥ 1"]
    assert rows["messages"].notes == ["items ≥ 1", "`content` may be null."]
    assert rows["messages[].role"].required        # every form requires it
    assert rows["messages[].role"].types == ['`"user"`', '`"assistant"`']
    content = rows["messages[].content"]
    assert not content.required and content.when == 'when `role` is `"user"`'
    assert content.types == ["string", "string or null"] and content.notes == ["length ≤ 9"]
    assert rows["messages[].calls"].when == "" and rows["messages[].calls[].name"].required
    assert rows["n"].notes == ["1..8", "default `1`"] and not rows["n"].required
    assert api_doc.type_text(BODY["properties"]["stop"]) == "string or array of string or null"
    assert rows["stop"].notes == ["items ≤ 4"]
    assert api_doc.type_text(BODY["properties"]["mode"]) == '`"off"` or `"on"` or `null`'


def test_a_route_section_lists_parameters_body_and_statuses():
    op = {"summary": "Do a thing", "parameters": [
        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "requestBody": {"content": {"application/json": {"schema": BODY}}},
        "responses": {"413": {"description": "too big", "content": {"text/plain": {}}},
                      "200": {"description": "success", "content": {"application/json": {
                          "schema": {"type": "object", "required": ["id"],
                                     "properties": {"id": {"type": "string"}}}}}}}}
    text = "\n".join(api_doc.route_section("post", "/v1/things/{id}", op))
    assert '<a id="post-v1-things-id"></a>\n#### `POST /v1/things/{id}`\n\nDo a thing.' in text
    assert "| `id` | path | string | yes |  |" in text
    assert "| `messages[].content` | string or null | when `role` is `\"user\"` | length ≤ 9 |" \
        in text
    assert text.index("| `200` | success") < text.index("| `413` | too big | `text/plain` |")
    assert "(object with `id`)" in text and "Success body" in text


def test_the_readme_route_table_names_every_route_family():
    """One line per family in the README; every registered route falls under a path it names
    (the full table is docs/api.md)."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## What it serves"):readme.index("## Configuration")]
    named = [n.rstrip("*").rstrip("/") for n in re.findall(r"`(/[^`\s]*)`", table)]
    missing = []
    for _method, path in sorted(registered_routes()):
        static = path.split("{")[0].rstrip("/")
        if static and not any(static == n or static.startswith(n + "/") or
                              n.startswith(static + "/") for n in named):
            missing.append(path)
    assert not missing, f"routes no line of the README's table names: {missing}"


def test_every_command_is_in_the_cli_page():
    text = (ROOT / "docs" / "cli.md").read_text()
    for path, _cmd in _commands(cli, "hypnos", groups=True):
        assert f"`{path}" in text, f"{path} is missing from docs/cli.md"


def test_the_readme_is_short_and_shows_the_default_lineup():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    lineup = [e.id for e in load_catalog().lineup()]
    assert "qwen2.5-coder:0.5b" in lineup
    for model in lineup:
        assert f"| `{model}` |" in readme, f"{model} is missing from the README's lineup table"
    first_request = readme[readme.index("## A first request"):readme.index("## The default")]
    assert 'model="qwen2.5-coder:0.5b"' in first_request


def _anchors(doc: Path) -> set[str]:
    """The ids a Markdown file offers: explicit <a id>, and GitHub's slug of each heading."""
    text = doc.read_text()
    ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
        ids.add(slug.replace(" ", "-"))
    return ids


def test_every_relative_link_in_the_documents_resolves():
    # docs/api-concepts.md is checked as it lands in docs/api.md, where its links point.
    docs = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                        if p != api_doc.CONCEPTS)]
    checked = 0
    for doc in docs:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, frag = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            assert dest.exists(), f"{doc.name} links to {target}, which does not exist"
            if frag:
                assert frag in _anchors(dest), f"{doc.name} links to {target}: no such anchor"
            checked += 1
    assert checked > 40


def test_nothing_points_at_the_removed_copy_of_the_contract():
    assert not (ROOT / "docs" / "hypnos-api.md").exists()
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    stale = [f for f in files if f != "tests/unit/test_docs_tree.py"
             and (ROOT / f).is_file() and "hypnos-api.md" in (ROOT / f).read_text(errors="ignore")]
    assert not stale, f"these still name docs/hypnos-api.md: {stale}"
