"""API keys and per-key limits (spec section 2): matching, 401/429 envelopes and headers,
the sliding minute, the UTC day's tokens surviving a restart, keys never logged."""
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import load_config, parse_config
from hypnos.service.config.schema import KeyConfig, ServerConfig
from hypnos.service.keys import (KeyRing, Limiter, QuotaBook, key_label, secs_to_utc_midnight,
                                 state_path)
from hypnos.service.errors import RateLimited

Sanic.test_mode = True
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
KEYS = """
[server]
api_keys = ["root-key"]
{extra}
[[server.keys]]
key = "alice-key"
label = "alice"
requests_per_minute = 3
[[server.keys]]
key = "bob-key"
tokens_per_day = 20
[[server.keys]]
key = "carol-key"
label = "carol"
max_concurrent = 1
"""
MODEL = f"""
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "{GGUF}"
context_len = 2048
"""


def make_app(tmp_path, extra: str = ""):
    path = tmp_path / "hypnos.toml"
    text = f'models_dir = "{MODELS_DIR}"\n' + KEYS.format(extra=extra) + MODEL
    path.write_text(text)
    cfg = parse_config(tomllib.loads(text), source=path)
    return create_app(cfg, catalog=load_catalog(), stage=False)


async def call(app, method, path, key=None, **kw):
    headers = kw.pop("headers", {})
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    _req, resp = await getattr(app.asgi_client, method)(path, headers=headers, **kw)
    return resp


def error_of(resp, status):
    assert resp.status == status, resp.text
    return resp.json["error"]


# ---------------------------------------------------------------- pure parts

class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def ring(**limits):
    return KeyRing(ServerConfig(api_keys=["plain"],
                                keys=[KeyConfig(key="k1", label="one", **limits)]))


def test_match_labels_and_admin():
    r = ring()
    assert r.match("plain").admin is True and r.match("plain").label == key_label("plain")
    assert r.match("k1").label == "one" and r.match("k1").admin is False
    assert r.match("k2") is None and r.match("") is None
    assert key_label("plain").startswith("key-") and "plain" not in key_label("plain")
    assert "k1" not in repr(r.match("k1"))


def test_requests_per_minute_window_slides_and_names_retry_after():
    clock = Clock()
    lim = Limiter(QuotaBook(None), clock=clock)
    key = ring(requests_per_minute=2).match("k1")
    for _ in range(2):
        lim.release(lim.admit(key))
        clock.t += 10
    with pytest.raises(RateLimited) as exc:
        lim.admit(key)
    assert exc.value.code == "requests_per_minute"
    assert exc.value.headers["Retry-After"] == "40"      # the first call leaves at t+60
    clock.t += 40
    lim.admit(key)


def test_max_concurrent_counts_until_release():
    lim = Limiter(QuotaBook(None))
    key = ring(max_concurrent=2).match("k1")
    a, b = lim.admit(key), lim.admit(key)
    with pytest.raises(RateLimited) as exc:
        lim.admit(key)
    assert exc.value.code == "max_concurrent" and exc.value.headers["Retry-After"] == "1"
    lim.release(a)
    lim.release(a)                 # a second release of the same permit frees nothing
    assert lim.in_flight("one") == 1
    lim.release(lim.admit(key))
    lim.release(b)
    assert lim.in_flight("one") == 0


def test_tokens_per_day_resets_at_utc_midnight_and_persists(tmp_path):
    wall = Clock(86400 * 20000 + 86000)      # 400 s before a UTC midnight
    path = tmp_path / "hypnos.state.json"
    book = QuotaBook(path, wall=wall)
    lim = Limiter(book)
    key = ring(tokens_per_day=100).match("k1")
    lim.release(lim.admit(key), tokens=150)
    with pytest.raises(RateLimited) as exc:
        lim.admit(key)
    assert exc.value.code == "tokens_per_day" and exc.value.headers["Retry-After"] == "400"
    assert QuotaBook(path, wall=wall).used("one") == 150          # a restart keeps the count
    assert "k1" not in path.read_text()                          # labels only, never keys
    wall.t += 401
    assert QuotaBook(path, wall=wall).used("one") == 0           # a new UTC day
    lim.admit(key)


def test_standing_reports_what_is_left_of_each_budget():
    """What the realtime route's rate_limits.updated lists (issue 42): requests and tokens,
    counted as admit and release count them; max_concurrent is a bound, not listed."""
    clock, wall = Clock(), Clock(86400 * 20000 + 86000)     # 400 s before a UTC midnight
    lim = Limiter(QuotaBook(None, wall=wall), clock=clock)
    both = ring(requests_per_minute=3, tokens_per_day=100, max_concurrent=5).match("k1")
    assert [(s.name, s.limit, s.remaining, s.reset_seconds) for s in lim.standing(both)] == \
        [("requests", 3, 3, 0.0), ("tokens", 100, 100, 400.0)]
    lim.release(lim.admit(both), tokens=30)
    clock.t += 10
    permit = lim.admit(both)
    requests, tokens = lim.standing(both, unbilled_tokens=25)
    assert (requests.remaining, requests.reset_seconds) == (1, 60.0)   # the newest leaves last
    assert tokens.remaining == 100 - 30 - 25
    assert lim.standing(both, unbilled_tokens=500)[1].remaining == 0
    clock.t += 55
    assert lim.standing(both)[0].remaining == 2                         # the first one left
    lim.release(permit)
    assert lim.standing(ring().match("k1")) == []                       # no budget: nothing
    assert lim.standing(ring().match("plain")) == []


def test_unreadable_state_file_starts_from_zero(tmp_path, caplog):
    path = tmp_path / "hypnos.state.json"
    path.write_text("{not json")
    assert QuotaBook(path).used("x") == 0
    assert "unreadable quota state" in caplog.text


def test_secs_to_midnight():
    assert secs_to_utc_midnight(86400 * 5 + 86399.5) == 1
    assert secs_to_utc_midnight(86400 * 5) == 86400


def test_env_keys_and_state_path(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("")
    cfg = load_config(path, env={"HYPNOS_API_KEYS": " a , b,"})
    assert KeyRing(cfg.server).match("b").admin is True
    assert state_path(path) == tmp_path / "x.state.json"


# ---------------------------------------------------------------- through the app



@pytest.mark.anyio
async def test_401_shapes_and_open_routes(tmp_path):
    app = make_app(tmp_path)
    resp = await call(app, "get", "/v1/models")
    err = error_of(resp, 401)
    assert err == {"message": "Missing API key. Send it as `Authorization: Bearer <key>` "
                              "(server.api_keys).", "type": "invalid_request_error",
                   "param": None, "code": "invalid_api_key"}
    assert resp.headers["www-authenticate"] == 'Bearer realm="hypnos"'
    for header in ("Bearer nope", "Basic root-key", "root-key"):
        resp = await call(app, "get", "/v1/models", headers={"authorization": header})
        assert error_of(resp, 401)["code"] == "invalid_api_key"
        assert resp.headers["www-authenticate"] == 'Bearer realm="hypnos"'
    resp = await call(app, "get", "/v1/models", headers={"authorization": "  BEARER   alice-key "})
    assert resp.status == 200
    for path in ("/health", "/ready", "/metrics"):
        assert (await call(app, "get", path)).status == 200


@pytest.mark.anyio
async def test_metrics_closed_when_asked(tmp_path):
    app = make_app(tmp_path, "metrics_require_auth = true\n")
    assert error_of(await call(app, "get", "/metrics"), 401)["code"] == "invalid_api_key"
    assert (await call(app, "get", "/metrics", key="root-key")).status == 200


@pytest.mark.anyio
async def test_requests_per_minute_429(tmp_path):
    app = make_app(tmp_path)
    for _ in range(3):
        assert (await call(app, "get", "/v1/models", key="alice-key")).status == 200
    resp = await call(app, "get", "/v1/models", key="alice-key")
    err = error_of(resp, 429)
    assert err["type"] == "rate_limit_error" and err["code"] == "requests_per_minute"
    assert err["param"] is None
    assert 1 <= int(resp.headers["retry-after"]) <= 60
    # Another key is not affected; the rejection is counted under the label.
    assert (await call(app, "get", "/v1/models", key="root-key")).status == 200
    text = (await call(app, "get", "/metrics")).text
    assert 'hypnos_api_key_rejections_total{key="alice"} 1.0' in text
    assert 'hypnos_api_key_requests_total{key="alice"} 3.0' in text
    assert "alice-key" not in text
