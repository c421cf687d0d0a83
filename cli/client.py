"""A small blocking HTTP client for the commands that talk to a running server.

Exit codes (documented in the man page): 0 success, 1 the server said no (its error message is
printed as it is, followed by the status and the error type), 2 a usage error (click's own),
3 the server cannot be reached (connection refused, DNS, TLS, no answer to connect).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import click
import httpx

DEFAULT_URL = "http://127.0.0.1:9999"


class ServerSaidNo(click.ClickException):
    """The server answered with an error status; exit 1."""

    exit_code = 1

    def __init__(self, status: int, message: str, err_type: str | None, body: dict | None):
        suffix = f"{status} {err_type}" if err_type else str(status)
        super().__init__(f"{message} ({suffix})")
        self.status, self.err_type, self.body = status, err_type, body


class Unreachable(click.ClickException):
    """No HTTP answer at all; exit 3."""

    exit_code = 3


def error_of(resp: httpx.Response) -> ServerSaidNo:
    """The spec's envelope (section 4) as an exception; GET /ready's {"reason"} and the
    plain-text errors (408, 413) as they are."""
    try:
        body = resp.json()
        if "reason" in body and "error" not in body:
            return ServerSaidNo(resp.status_code, str(body["reason"]), None, body)
        err = body["error"]
        return ServerSaidNo(resp.status_code, str(err["message"]), err.get("type"), body)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = resp.text.strip() or resp.reason_phrase
        return ServerSaidNo(resp.status_code, text, None, None)


@dataclass
class Client:
    """One server. Every call blocks until the answer (or ``timeout`` seconds without one).
    With ``echo_errors`` the error body goes to stdout before the exception, for --json."""

    url: str = DEFAULT_URL
    api_key: str | None = None
    timeout: float = 900.0       # the server's request_timeout_secs: a promotion may take long
    echo_errors: bool = False

    @property
    def base(self) -> str:
        return self.url.rstrip("/")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def request(self, method: str, path: str, *, body: dict | None = None,
                params: dict | None = None, timeout: float | None = None,
                files: dict | None = None, data: dict | None = None) -> httpx.Response:
        """The raw response of a 2xx answer; raises ServerSaidNo or Unreachable otherwise.
        ``files`` and ``data`` send a multipart form instead of the JSON ``body``."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            resp = httpx.request(method, self.base + path, json=body, params=params,
                                 files=files, data=data,
                                 headers=self.headers(), timeout=timeout or self.timeout)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
            raise Unreachable(f"cannot reach the server at {self.base}: {exc}") from None
        except httpx.TimeoutException:
            raise click.ClickException(f"{method} {path}: no answer from {self.base} within "
                                       f"{timeout or self.timeout:g} s") from None
        except httpx.TransportError as exc:
            raise Unreachable(f"lost the connection to {self.base}: {exc}") from None
        if resp.status_code >= 400:
            err = error_of(resp)
            if self.echo_errors and err.body is not None:
                click.echo(json.dumps(err.body, indent=2, ensure_ascii=False))
            raise err
        return resp

    def get(self, path: str, **kw) -> dict:
        return self.request("GET", path, **kw).json()

    def post(self, path: str, body: dict | None = None, **kw) -> dict:
        return self.request("POST", path, body=body if body is not None else {}, **kw).json()

    def put(self, path: str, body: dict, **kw) -> dict:
        return self.request("PUT", path, body=body, **kw).json()

    def delete(self, path: str, **kw) -> dict:
        return self.request("DELETE", path, **kw).json()

    def answers(self, timeout: float = 1.0) -> bool:
        """Whether a Hypnos server answers GET /health now (never raises)."""
        try:
            return httpx.get(self.base + "/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False


def server_options(f):
    """Add --url / --api-key (and their environment variables) and pass ``client``.
    A command with ``as_json`` gets a client that echoes error bodies on stdout."""
    @functools.wraps(f)
    def wrapper(*args, url: str, api_key: str | None, **kw):
        url, api_key = _inherit(click.get_current_context(), url, api_key)
        client = Client(url, api_key, echo_errors=bool(kw.get("as_json")))
        return f(*args, client=client, **kw)
    wrapper = click.option("--api-key", envvar="HYPNOS_API_KEY", metavar="KEY",
                           help="API key sent as a bearer token (HYPNOS_API_KEY).")(wrapper)
    return click.option("--url", envvar="HYPNOS_URL", default=DEFAULT_URL, metavar="URL",
                        show_default=True,
                        help="Base URL of the server (HYPNOS_URL).")(wrapper)


def _inherit(ctx: click.Context, url: str, api_key: str | None) -> tuple[str, str | None]:
    """`hypnos tier --url X move ...`: a subcommand given no --url / --api-key of its own
    (nor the environment's) takes its group's."""
    from click.core import ParameterSource
    parent = ctx.parent
    if parent is None or "url" not in parent.params:
        return url, api_key
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    if ctx.get_parameter_source("url") not in given:
        url = parent.params["url"]
    if ctx.get_parameter_source("api_key") not in given:
        api_key = parent.params["api_key"]
    return url, api_key
