"""The model pool at run time (spec section 6) through the ASGI app on the real SmolLM2 GGUF:
add / replace / remove with the startup checks, the overlay and a restart, admin keys,
enable / disable, moe-offload; the scheduler's drain with a fake engine; the overlay's
old-or-new property under kill -9."""
import asyncio
import os
import signal
import subprocess
import sys
import time
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.service.app import create_app
from hypnos.service.config.load import load_config, overlay_path, parse_config
from hypnos.service.config.overlay import overlay_text
from hypnos.service.scheduling.pool import ModelState
from hypnos.service.refusals import Busy, UnknownModel
from hypnos.planner.types import ModelShape
from fakes import FakeEffects
from test_scheduler import make, model

Sanic.test_mode = True
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
BASE = f"""
[[models]]
id = "chat"
modality = "text_generation"
engine = "ggml_llama"
weights_path = "{GGUF}"
context_len = 2048
"""


def block(model_id="smol2", **extra) -> str:
    lines = [f'id = "{model_id}"', 'modality = "text_generation"', 'engine = "ggml_llama"',
             f'weights_path = "{GGUF}"'] + [f"{k} = {v}" for k, v in extra.items()]
    return "[[models]]\n" + "\n".join(lines) + "\n"


def write_config(tmp_path, server: str = "") -> "os.PathLike":
    require_smollm2()
    path = tmp_path / "hypnos.toml"
    path.write_text(f'models_dir = "{MODELS_DIR}"\n{server}{BASE}')
    return path


def app_from(path, **kw):
    return create_app(load_config(path, env={}), catalog=load_catalog(), stage=False, **kw)


async def call(app, method, path, key=None, **kw):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    _req, resp = await getattr(app.asgi_client, method)(path, headers=headers, **kw)
    return resp


def error_of(resp, status, type_):
    assert resp.status == status, resp.text
    assert resp.json["error"]["type"] == type_
    return resp.json["error"]["message"]


async def model_ids(app):
    return [m["id"] for m in (await call(app, "get", "/v1/models")).json["data"]]


# ---------------------------------------------------------------- add / replace / remove

@pytest.mark.anyio
async def test_add_replace_remove_persist_and_survive_a_restart(tmp_path):
    path = write_config(tmp_path)
    app = app_from(path)
    resp = await call(app, "post", "/v1/models", json={"config": block()})
    assert resp.status == 201, resp.text
    assert resp.json["model"] == "smol2" and resp.json["action"] == "added"
    assert resp.json["persisted"] is True
    assert resp.json["placement"]["primary_tier"] == "tier3_nvme_ssd"
    assert await model_ids(app) == ["chat", "smol2"]
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    resp = await call(app, "post", "/v1/chat/completions", json={**chat, "model": "smol2"})
    assert resp.status == 200, resp.text

    # PUT: the block's own id is ignored, the new settings apply under the path's id.
    resp = await call(app, "put", "/v1/models/chat",
                      json={"config": block("whatever", context_len=1024, slots=2)})
    assert resp.status == 200 and resp.json["action"] == "replaced", resp.text
    status = (await call(app, "get", "/v1/memory/status")).json
    assert [m["id"] for m in status["models"]] == ["chat", "smol2"]
    assert next(m for m in status["models"] if m["id"] == "chat")["placement"][
        "allocated_context_len"] == 1024

    resp = await call(app, "delete", "/v1/models/smol2?drain_secs=5")
    assert resp.status == 200 and resp.json == {"model": "smol2", "action": "removed",
                                                "persisted": True}
    error_of(await call(app, "post", "/v1/chat/completions", json={**chat, "model": "smol2"}),
             404, "model_not_found")

    overlay = tomllib.loads(overlay_path(path).read_text())
    assert [m["id"] for m in overlay["models"]] == ["chat"] and overlay["removed"] == ["smol2"]
    assert "smol2" not in path.read_text() and "slots" not in path.read_text()  # untouched
    again = app_from(path)                         # a restart applies the overlay
    assert await model_ids(again) == ["chat"]
    assert again.ctx.scheduler.models["chat"].cfg.slots == 2
    # Added back after a removal: out of "removed", in the blocks.
    resp = await call(again, "post", "/v1/models", json={"config": block()})
    assert resp.status == 201
    overlay = tomllib.loads(overlay_path(path).read_text())
    assert overlay["removed"] == [] and [m["id"] for m in overlay["models"]] == ["chat", "smol2"]


@pytest.mark.anyio
async def test_add_from_the_catalog(tmp_path):
    app = app_from(write_config(tmp_path))
    resp = await call(app, "post", "/v1/models", json={"catalog": "smollm2:135m"})
    assert resp.status == 201, resp.text
    assert resp.json["model"] == "smollm2:135m"
    cat = (await call(app, "get", "/v1/models/catalog")).json["data"]
    assert next(e for e in cat if e["id"] == "smollm2:135m")["configured"] is True
    message = error_of(await call(app, "post", "/v1/models", json={"catalog": "nope:1b"}),
                       400, "invalid_request_error")
    assert "nope:1b" in message


def tiny_gguf(path, arch="weirdarch"):
    import gguf
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.add_head_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.anyio
@pytest.mark.parametrize("body,fragment", [
    ({}, "exactly one"),
    ({"catalog": "smollm2:135m", "config": block()}, "exactly one"),
    ({"config": 5}, "'config' must be a string"),
    ({"config": "[[models]\nid="}, "not valid TOML"),
    ({"config": block("chat")}, "is taken"),
    ({"config": block("x", slots=0)}, "models[0].slots"),
    ({"config": block("x").replace(GGUF, "nowhere/missing.gguf")}, "is not in models_dir"),
    ({"config": block("x").replace(GGUF, "../../etc/passwd")}, "outside models_dir"),
    ({"config": block("x") + '[models.arch]\narchitecture = "qwen2"\n'}, "GGUF reports 'llama'"),
])
async def test_startup_checks_refuse_with_400(tmp_path, body, fragment):
    app = app_from(write_config(tmp_path))
    message = error_of(await call(app, "post", "/v1/models", json=body), 400,
                       "invalid_request_error")
    assert fragment in message
    assert await model_ids(app) == ["chat"]
    assert not overlay_path(tmp_path / "hypnos.toml").exists()


@pytest.mark.anyio
async def test_an_untested_architecture_is_refused(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    tiny_gguf(models / "weird.gguf")
    path = tmp_path / "hypnos.toml"
    path.write_text(f'models_dir = "{models}"\n')
    app = app_from(path)
    message = error_of(await call(app, "post", "/v1/models", json={
        "config": block("w").replace(GGUF, "weird.gguf")}), 400, "invalid_request_error")
    assert "'weirdarch' is not one Hypnos has been tested with" in message


@pytest.mark.anyio
async def test_unknown_ids_and_bad_drain(tmp_path):
    app = app_from(write_config(tmp_path))
    error_of(await call(app, "put", "/v1/models/nope", json={"config": block()}), 404,
             "model_not_found")
    error_of(await call(app, "delete", "/v1/models/nope"), 404, "model_not_found")
    error_of(await call(app, "delete", "/v1/models/chat?drain_secs=soon"), 400,
             "invalid_request_error")
    error_of(await call(app, "put", "/v1/models/chat",
                        json={"config": block(), "drain_secs": -1}), 400,
             "invalid_request_error")


@pytest.mark.anyio
async def test_not_persisted_when_the_overlay_cannot_be_written(tmp_path):
    path = write_config(tmp_path)
    app = app_from(path)
    overlay_path(path).mkdir()                  # a folder where the file should be
    resp = await call(app, "post", "/v1/models", json={"config": block()})
    assert resp.status == 201 and resp.json["persisted"] is False
    cfg = parse_config(tomllib.loads(path.read_text()))      # no config file: nowhere to write
    app = create_app(cfg, catalog=load_catalog(), stage=False)
    resp = await call(app, "post", "/v1/models", json={"config": block()})
    assert resp.status == 201 and resp.json["persisted"] is False
    assert await model_ids(app) == ["chat", "smol2"]


@pytest.mark.anyio
async def test_pool_changes_need_an_admin_key(tmp_path):
    keys = ('[server]\napi_keys = ["root"]\n[[server.keys]]\nkey = "user"\n'
            '[[server.keys]]\nkey = "ops"\nadmin = true\n')
    app = app_from(write_config(tmp_path, keys))
    for method, route, kw in (("post", "/v1/models", {"json": {"config": block()}}),
                              ("put", "/v1/models/chat", {"json": {"config": block()}}),
                              ("delete", "/v1/models/chat", {})):
        error_of(await call(app, method, route, key="user", **kw), 403, "permission_denied")
    assert (await call(app, "get", "/v1/models")).status == 401
    assert (await call(app, "post", "/v1/models", key="ops",
                       json={"config": block()})).status == 201
    assert (await call(app, "delete", "/v1/models/smol2", key="root")).status == 200
    # enable / disable are not pool changes: any key may use them.
    assert (await call(app, "post", "/v1/models/chat/disable", key="user")).status == 200


@pytest.mark.anyio
async def test_staging_refuses_pool_changes(tmp_path):
    import threading
    gate = threading.Event()
    cfg = load_config(write_config(tmp_path), env={})
    app = create_app(cfg, catalog=load_catalog(), before_stage=gate.wait)
    try:
        resp = await call(app, "post", "/v1/models", json={"config": block()})
        error_of(resp, 503, "model_not_available")
    finally:
        gate.set()


# ---------------------------------------------------------------- enable / disable / moe

@pytest.mark.anyio
async def test_enable_disable(tmp_path):
    app = app_from(write_config(tmp_path))
    sched = app.ctx.scheduler
    resp = await call(app, "post", "/v1/memory/tier",
                      json={"model": "chat", "target_tier": "tier1_gpu_vram"})
    assert resp.json["current_tier"] == "tier1_gpu_vram"
    async with sched.hold("chat"):
        error_of(await call(app, "post", "/v1/models/chat/disable"), 429, "model_busy")
    resp = await call(app, "post", "/v1/models/chat/disable")
    assert resp.status == 200 and resp.json["enabled"] is False
    assert resp.json["placement"]["primary_tier"] == "tier3_nvme_ssd"     # evicted to disk
    assert sched.models["chat"].engine is None
    assert await model_ids(app) == []
    error_of(await call(app, "post", "/v1/chat/completions", json={
        "model": "chat", "messages": [{"role": "user", "content": "x"}]}), 404, "model_disabled")
    resp = await call(app, "post", "/v1/models/chat/enable")
    assert resp.json == {"model": "chat", "enabled": True, "placement": resp.json["placement"]}
    assert await model_ids(app) == ["chat"]
    error_of(await call(app, "post", "/v1/models/nope/enable"), 404, "model_not_found")


@pytest.mark.anyio
async def test_moe_offload(tmp_path):
    app = app_from(write_config(tmp_path))
    sched = app.ctx.scheduler
    error_of(await call(app, "post", "/v1/models/chat/moe-offload", json={"mode": "max"}),
             422, "invalid_request_error")
    error_of(await call(app, "post", "/v1/models/nope/moe-offload", json={"mode": "on"}),
             404, "model_not_found")
    await call(app, "post", "/v1/memory/tier", json={"model": "chat",
                                                     "target_tier": "tier1_gpu_vram"})
    async with sched.hold("chat"):
        resp = await call(app, "post", "/v1/models/chat/moe-offload", json={"mode": "auto"})
        assert resp.json["applies"] == "next_load" and resp.json["moe_offload"] == "auto"
        assert sched.models["chat"].tier == "tier1_gpu_vram"         # busy: left loaded
    resp = await call(app, "post", "/v1/models/chat/moe-offload", json={"mode": "on"})
    assert resp.status == 200 and resp.json["applies"] == "now"
    assert sched.models["chat"].tier == "tier2_pinned_ram"           # idle: unloaded
    status = (await call(app, "get", "/v1/memory/status")).json["models"][0]
    assert status["moe_offload"] == "on"


# ---------------------------------------------------------------- drain (fake engine)

def fresh(mid="a", slots=1):
    m = model(mid, slots=slots)
    return ModelState(cfg=m, paths={}, shape=ModelShape(weights_bytes=100 * 2**20))


@pytest.mark.anyio
async def test_swap_drains_running_and_serves_waiting_with_the_replacement():
    effects = FakeEffects()
    sched = make([(model("a"), 100)], effects)
    old = sched.models["a"]
    new = fresh("a")
    served_by = []
    running = asyncio.Event()
    release = asyncio.Event()

    async def long_request():
        async with sched.lease("a") as lease:
            running.set()
            effects.serving.add("a")
            await release.wait()
            effects.serving.discard("a")
            served_by.append(lease.model)

    async def later_request():
        async with sched.lease("a") as lease:
            served_by.append(lease.model)

    first = asyncio.create_task(long_request())
    await running.wait()
    swap = asyncio.create_task(sched.pool.swap("a", new, drain_secs=10))
    await asyncio.sleep(0.1)
    assert sched.pool.is_changing("a")
    second = asyncio.create_task(later_request())
    await asyncio.sleep(0.1)
    assert not swap.done() and not second.done()     # both wait for the running request
    release.set()
    await asyncio.gather(first, swap, second)
    assert served_by == [old, new]
    assert sched.models["a"] is new and old.engine is None
    assert effects.violations == []                   # never unloaded while serving


@pytest.mark.anyio
async def test_swap_past_drain_secs_changes_nothing_and_removal_answers_404():
    sched = make([(model("a"), 100)])
    old = sched.models["a"]
    release = asyncio.Event()

    async def long_request():
        async with sched.lease("a"):
            await release.wait()

    first = asyncio.create_task(long_request())
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(Busy, match="drain_secs"):
        await sched.pool.swap("a", fresh("a"), drain_secs=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert sched.models["a"] is old and old.enabled and old.engine is not None

    async def later():
        async with sched.lease("a"):
            pass

    removal = asyncio.create_task(sched.pool.swap("a", None, drain_secs=10))
    await asyncio.sleep(0.05)
    waiting = asyncio.create_task(later())
    await asyncio.sleep(0.05)
    release.set()
    await asyncio.gather(first, removal)
    with pytest.raises(UnknownModel):
        await waiting
    assert "a" not in sched.models


# ---------------------------------------------------------------- overlay under kill -9

def test_overlay_text_keeps_comments_and_replaces_by_id():
    current = "# my note\nremoved = [\"x\"]\n[[models]]\nid = \"a\"\nslots = 1\n"
    text = overlay_text(current, "a", block("ignored", slots=3))
    assert text.startswith("# my note")
    data = tomllib.loads(text)
    assert [(m["id"], m["slots"]) for m in data["models"]] == [("a", 3)]
    data = tomllib.loads(overlay_text(text, "x", block("x")))
    assert data["removed"] == [] and [m["id"] for m in data["models"]] == ["a", "x"]


WRITER = """
import sys
from pathlib import Path
from hypnos.service.config.atomic import write_atomic
from hypnos.service.config.overlay import persist
mode, config = sys.argv[1], Path(sys.argv[2])
blocks = [Path(a).read_text() for a in sys.argv[3:]]
write = ((lambda text: persist(config, "big", text)) if mode == "overlay"
         else (lambda text: write_atomic(config, text)))
write(blocks[0])
print("ready", flush=True)
i = 1
while True:
    write(blocks[i % 2])
    i += 1
"""


def kill_while_writing(tmp_path, mode: str, target, versions: list[str], rounds: int = 10):
    """Run the writer, SIGKILL it at random moments; yield the target's text after each."""
    import random
    rng = random.Random(8)
    files = []
    for i, v in enumerate(versions):
        files.append(tmp_path / f"version{i}.txt")
        files[-1].write_text(v)
    for _ in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, mode, str(target),
                                 *map(str, files)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.02, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        yield (overlay_path(target) if mode == "overlay" else target).read_text()


def test_overlay_survives_a_kill_mid_persist(tmp_path):
    """The overlay route's own writer, killed at random moments: the overlay on disk is
    always exactly the old or the new one."""
    config = tmp_path / "hypnos.toml"
    config.write_text("")
    blocks = [block("big", slots=1), block("big", slots=2)]
    expected = {overlay_text(None, "big", b) for b in blocks}
    seen = set()
    for text in kill_while_writing(tmp_path, "overlay", config, blocks):
        assert text in expected, f"torn overlay: {text!r}"
        seen.add(text)
    assert seen == expected


def test_atomic_write_killed_mid_write_leaves_old_or_new(tmp_path):
    """Files large enough (16 MiB) that the kills land inside the write itself: a leftover
    temporary file proves it, and the target is still exactly one whole version."""
    target = tmp_path / "big.toml"
    versions = ["a" * 2**24, "b" * 2**24]
    for text in kill_while_writing(tmp_path, "raw", target, versions):
        assert len(text) == 2**24 and text in versions
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers, "no kill landed inside a write"
