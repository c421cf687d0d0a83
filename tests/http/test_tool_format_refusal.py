"""Tools sent to a model without a tool calling format are refused before anything loads.

Regression (issue #28, item 7): the format was checked twice, the second time on the loaded
engine inside the lease, so the check's place let a model load only to be refused. It is
now checked once, on the model's config, before the lease: the fake effects see no load.
"""
import pytest
from sanic import Sanic

from fakes import FakeEffects
from hypnos.catalog.catalog import load_catalog
from hypnos.planner.types import Tier
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config

Sanic.test_mode = True
pytestmark = pytest.mark.anyio

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
# The same refused request in each dialect that takes a chat lease.
REQUESTS = {
    "/v1/chat/completions": {"model": "chat", "messages": MESSAGES, "tools": [TOOL]},
    "/v1/messages": {"model": "chat", "max_tokens": 16, "messages": MESSAGES, "tools": [
        {"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}]},
    "/api/chat": {"model": "chat", "messages": MESSAGES, "tools": [TOOL], "stream": False},
}


def app_with(effects: FakeEffects):
    cfg = parse_config({"models": [{
        "id": "chat", "modality": "text_generation", "engine": "ggml_llama",
        "weights_path": "chat.gguf", "tool_format": "none"}]})
    return create_app(cfg, catalog=load_catalog(), stage=False, effects=effects)


@pytest.mark.parametrize("path", sorted(REQUESTS))
async def test_tools_to_a_model_without_a_tool_format_load_nothing(path):
    fx = FakeEffects()
    app = app_with(fx)
    _req, resp = await app.asgi_client.post(path, json=REQUESTS[path])
    assert resp.status == 400, resp.text
    assert "tool calling format" in resp.text
    assert fx.log == []                                   # refused before the lease
    assert app.ctx.scheduler.models["chat"].tier is not Tier.GPU
