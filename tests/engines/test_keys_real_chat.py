"""Per-key token quotas charged by a real chat on SmolLM2 (moved from tests/http/test_keys.py)."""
import json
import logging
import pytest
from conftest import require_smollm2
from hypnos.service.keys import (key_label, secs_to_utc_midnight,
                                 state_path)
from test_keys import call, error_of, make_app  # noqa: F401


@pytest.mark.anyio
async def test_tokens_per_day_charges_a_real_chat_and_survives_a_restart(tmp_path, caplog):
    require_smollm2()
    caplog.set_level(logging.DEBUG)
    app = make_app(tmp_path)
    body = {"model": "chat", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hi"}]}
    resp = await call(app, "post", "/v1/chat/completions", key="bob-key", json=body)
    assert resp.status == 200, resp.text
    used = resp.json["usage"]["total_tokens"]
    assert used > 20
    resp = await call(app, "post", "/v1/chat/completions", key="bob-key", json=body)
    err = error_of(resp, 429)
    assert err["code"] == "tokens_per_day" and err["type"] == "rate_limit_error"
    assert int(resp.headers["retry-after"]) == pytest.approx(secs_to_utc_midnight(), abs=5)
    label = key_label("bob-key")
    text = (await call(app, "get", "/metrics")).text
    assert f'hypnos_api_key_tokens_today{{key="{label}"}} {float(used)}' in text
    state = json.loads(state_path(tmp_path / "hypnos.toml").read_text())
    assert state["tokens"] == {label: used}
    # A new process on the same config: the day's count comes back from the state file.
    again = make_app(tmp_path)
    resp = await call(again, "post", "/v1/chat/completions", key="bob-key", json=body)
    assert error_of(resp, 429)["code"] == "tokens_per_day"
    for record in caplog.records:
        assert "bob-key" not in record.getMessage()
