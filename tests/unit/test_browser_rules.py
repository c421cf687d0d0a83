"""The rules of service/http/browser.py as plain functions, the strict JSON reader
(service/wire/json_text.py), and the config check of the two allow-lists."""
import socket
import tomllib

import pytest

from hypnos.service.config.load import ConfigError, parse_config
from hypnos.service.config.schema import ServerConfig
from hypnos.service.http import browser
from hypnos.service.errors import InvalidRequest
from hypnos.service.wire import json_text


@pytest.mark.parametrize("header,name", [
    ("Box.LAN:9999", "box.lan"), ("[::1]:80", "::1"), ("::1", "::1"),
    ("example.com.", "example.com"),
    ("127.0.0.1", "127.0.0.1"), ("[fe80::1]", "fe80::1")])
def test_host_name_drops_port_brackets_case_and_the_root_dot(header, name):
    assert browser.host_name(header) == name


def test_loopback_names():
    for name in ("localhost", "app.localhost", "127.0.0.1", "127.255.0.9", "::1"):
        assert browser.is_loopback(name), name
    for name in ("localhost.evil.example", "evil.example", "10.0.0.1", "0.0.0.0", "", "::"):
        assert not browser.is_loopback(name), name


def test_host_allowed_by_each_source_and_not_otherwise():
    own = frozenset({"box", "192.168.1.5"})
    server = ServerConfig()
    assert browser.host_allowed("box", server, own)
    assert browser.host_allowed("192.168.1.5", server, own)
    assert browser.host_allowed("10.1.2.3", server, own, local_address="::ffff:10.1.2.3")
    assert not browser.host_allowed("evil.example", server, own)
    assert not browser.host_allowed("", server, own)     # ":80" names no host
    assert browser.host_allowed("evil.example", ServerConfig(allowed_hosts=["*"]), own)
    assert browser.host_allowed("api.lan", ServerConfig(allowed_hosts=["API.lan:443"]), own)
    assert browser.host_allowed("api.lan", ServerConfig(host="api.lan"), own)
    assert not browser.host_allowed("0.0.0.0", ServerConfig(host="0.0.0.0"), own)


def test_origins_listed_and_own():
    listed = ["http://lab.example:*", "https://app.example"]
    for origin in ("http://localhost:5173", "http://[::1]", "https://127.0.0.1:8443",
                   "http://lab.example", "http://lab.example:81", "https://app.example"):
        assert browser.origin_listed(origin, listed), origin
    for origin in ("http://lab.example.evil.example", "https://lab.example", "null",
                   "ftp://localhost", "http://app.example", "http://localhost.evil.example"):
        assert not browser.origin_listed(origin, listed), origin
    assert browser.origin_listed("null", ["null"]) and not browser.origin_listed("null", ["*"])
    assert browser.own_origin("http://box.lan:9999", "Box.lan:9999")
    assert browser.own_origin("https://box.lan", "box.lan")       # behind a TLS proxy
    assert not browser.own_origin("http://box.lan:8080", "box.lan:9999")
    assert not browser.own_origin("http://box.lan", "")


def test_machine_names_hold_the_host_name_and_no_wildcard():
    names = browser.machine_names()
    assert socket.gethostname().lower().rstrip(".") in names
    assert not names & {"", "*", "0.0.0.0", "::"}


@pytest.mark.parametrize("text,says", [
    ('{"a": NaN}', "NaN"), ('[Infinity]', "Infinity"), ('{"a": -Infinity}', "-Infinity"),
    ('{"a": 1e400}', "1e400"), ('{"a": -1e999}', "-1e999"), ('{"a": ', "not valid JSON")])
def test_strict_json_refuses_what_json_does_not_have(text, says):
    with pytest.raises(InvalidRequest) as caught:
        json_text.loads(text, "The request body", "x")
    assert says in caught.value.message and caught.value.param == "x"
    assert caught.value.message.startswith("The request body")


def test_strict_json_keeps_integral_floats_as_ints():
    assert json_text.loads('{"a": 2480.0, "b": 0.5, "c": 1e3}', "body") == \
        {"a": 2480, "b": 0.5, "c": 1000}


@pytest.mark.parametrize("server,key", [
    ('allowed_hosts = [""]', "server.allowed_hosts[0]"),
    ('allowed_hosts = ["ok", "http://box.lan"]', "server.allowed_hosts[1]"),
    ('allowed_hosts = ["box lan"]', "server.allowed_hosts[0]"),
    ('allowed_origins = ["box.lan:8080"]', "server.allowed_origins[0]"),
    ('allowed_origins = ["http://"]', "server.allowed_origins[0]"),
    ('allowed_origins = ["*", "http://box.lan/app"]', "server.allowed_origins[1]"),
])
def test_bad_allow_list_entries_name_the_dotted_key(server, key):
    with pytest.raises(ConfigError) as caught:
        parse_config(tomllib.loads("[server]\n" + server))
    assert any(p.startswith(key + ":") for p in caught.value.problems), caught.value.problems


def test_good_allow_list_entries_load():
    cfg = parse_config(tomllib.loads(
        '[server]\nallowed_hosts = ["*", "box.lan", "box.lan:9999", "192.168.1.5", "[::1]"]\n'
        'allowed_origins = ["*", "null", "http://lab:*", "https://app.example/", '
        '"tauri://localhost"]\n'))
    assert len(cfg.server.allowed_hosts) == 5 and len(cfg.server.allowed_origins) == 5
