"""The playground's serving, without a browser: GET / is the page, its files come from the
package, /v1 is untouched, and `hypnos serve --no-playground` answers 404 at /."""
import shutil
import subprocess
import sys
import tomllib
import zipfile
from html.parser import HTMLParser

import httpx
import pytest
from sanic import Sanic

from conftest import ROOT
from test_http import app_for, assert_envelope, call, config
from hypnos.service.routes.playground import PLAYGROUND_DIR

sys.path.insert(0, str(ROOT / "bench"))
from harness import ManagedProcess  # noqa: E402

Sanic.test_mode = True


class _Refs(HTMLParser):
    """The files index.html loads (scripts and stylesheets)."""

    def __init__(self):
        super().__init__()
        self.refs = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.refs.append(a["src"])
        if tag == "link" and a.get("rel") == "stylesheet":
            self.refs.append(a["href"])


def _imports(js: str) -> list[str]:
    import re
    return re.findall(r'^import .* from "\./([\w.]+)";$', js, re.M)


@pytest.mark.anyio
async def test_root_is_the_page_and_every_file_it_loads_is_served():
    app = app_for()
    resp = await call(app, "get", "/")
    assert resp.status == 200
    assert resp.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in resp.headers["content-security-policy"]
    parser = _Refs()
    parser.feed(resp.text)
    assert "/playground/app.js" in parser.refs and "/playground/style.css" in parser.refs
    # Follow the module graph from app.js: every import is shipped and served as JavaScript.
    pending, seen = ["app.js"], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        js = await call(app, "get", f"/playground/{name}")
        assert js.status == 200, name
        assert js.headers["content-type"].startswith("text/javascript")
        pending += _imports(js.text)
    assert {"api.js", "tiers.js", "chat.js", "voice.js", "audio.js", "logs.js"} <= seen
    css = await call(app, "get", "/playground/style.css")
    assert css.status == 200 and css.headers["content-type"].startswith("text/css")


@pytest.mark.anyio
async def test_playground_never_shadows_the_api():
    app = app_for()
    models = await call(app, "get", "/v1/models")
    assert models.status == 200 and models.json["object"] == "list"
    assert_envelope(await call(app, "get", "/v1/nothing-here"), 404, "not_found")
    assert "Unknown route" in (await call(app, "get", "/v1/nothing-here")).json["error"]["message"]
    assert_envelope(await call(app, "get", "/v1/"), 404, "not_found")
    health = await call(app, "get", "/health")
    assert health.json["status"] == "ok"


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["nope.js", "..%2Froute_playground.py", ".hidden.js",
                                  "index.htm", "app.py"])
async def test_only_shipped_files_are_served(name):
    resp = await call(app_for(), "get", f"/playground/{name}")
    assert_envelope(resp, 404, "not_found")


@pytest.mark.anyio
async def test_playground_off_in_config_is_404_and_api_unaffected():
    cfg = config()
    cfg.server.playground = False
    app = app_for(cfg)
    for path in ("/", "/playground/app.js"):
        resp = await call(app, "get", path)
        assert_envelope(resp, 404, "not_found")
        assert "playground is turned off" in resp.json["error"]["message"]
    assert (await call(app, "get", "/v1/models")).status == 200
    assert (await call(app, "get", "/v1/memory/status")).status == 200


def test_playground_off_in_the_config_file(tmp_path):
    from hypnos.service.config.load import load_config
    path = tmp_path / "hypnos.toml"
    path.write_text("[server]\nplayground = false\n")
    assert load_config(path).server.playground is False
    path.write_text("")
    assert load_config(path).server.playground is True


def _serve(tmp_path, *flags) -> ManagedProcess:
    path = tmp_path / "hypnos.toml"
    path.write_text(f'models_dir = "{tmp_path}"\n')      # no models: starts in a second
    return ManagedProcess(
        lambda port: [sys.executable, "-m", "hypnos.cli", "serve", "--config", str(path),
                      "--port", str(port), *flags],
        tmp_path / "server.log", "/ready", 60, cwd=ROOT)


@pytest.mark.slow
def test_hypnos_serve_with_and_without_playground(tmp_path):
    on = _serve(tmp_path)
    try:
        page = httpx.get(on.base + "/", timeout=10)
        assert page.status_code == 200 and "<title>Hypnos playground</title>" in page.text
    finally:
        on.stop()
    off = _serve(tmp_path, "--no-playground")
    try:
        resp = httpx.get(off.base + "/", timeout=10)
        assert resp.status_code == 404 and resp.json()["error"]["type"] == "not_found"
        assert httpx.get(off.base + "/playground/app.js", timeout=10).status_code == 404
        models = httpx.get(off.base + "/v1/models", timeout=10)
        listed = models.json()
        assert models.status_code == 200 and listed["object"] == "list" and listed["data"] == []
        assert listed["accelerator"] is False and listed["backend"] == "cpu"   # a CPU build
    finally:
        off.stop()


@pytest.mark.slow
def test_the_wheel_ships_every_playground_file(tmp_path):
    # Built from a copy of the sources, so setuptools' build/ never lands in the checkout.
    src = tmp_path / "src"
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"].values()
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in folders:
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(src)],
                   check=True, capture_output=True, cwd=tmp_path)
    wheel = next(tmp_path.glob("hypnos-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"hypnos/service/playground/{p.name}" for p in PLAYGROUND_DIR.iterdir()}
    assert {"hypnos/service/playground/index.html", "hypnos/service/playground/app.js"} <= shipped
    assert shipped <= names, shipped - names
