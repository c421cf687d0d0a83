"""Admission (spec section 1): x-hypnos-deadline-ms refused at once with 503 + Retry-After,
x-hypnos-estimated-wait-ms on admitted responses, the profile's objective as an implicit
deadline with limits.overload = "shed". The scheduler with a fake engine; the HTTP side on
the real SmolLM2 model."""
import asyncio
import tomllib

import pytest
from sanic import Sanic

from conftest import MODELS_DIR, require_smollm2
from hypnos.catalog.catalog import load_catalog
from hypnos.service import errors
from hypnos.service.refusals import OverDeadline
from hypnos.service.app import create_app
from hypnos.service.config.load import parse_config
from test_scheduler import make, model

Sanic.test_mode = True
pytestmark = pytest.mark.anyio
GGUF = "smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"


async def busy_model(overload: str, profile: str | None):
    """Model "a" resident, measured at 5 s a request, one request running."""
    sched = make([(model("a"), 100)])
    sched.config.limits.overload = overload
    sched.config.server.profile = profile
    async with sched.lease("a"):
        pass
    sched.models["a"].stats.service_ms = 5000.0
    release, running = asyncio.Event(), asyncio.Event()

    async def long_request():
        async with sched.lease("a"):
            running.set()
            await release.wait()
    task = asyncio.create_task(long_request())
    await running.wait()
    return sched, release, task


async def test_shed_applies_the_profile_objective_as_the_deadline():
    sched, release, task = await busy_model("shed", "chat")       # first_token 1000 ms
    with pytest.raises(OverDeadline) as exc:
        async with sched.lease("a"):
            pass
    assert errors.from_refusal(exc.value).headers["Retry-After"] == "5"
    assert "1000 ms" in exc.value.message
    release.set()
    await task


@pytest.mark.parametrize("overload,profile", [("queue", "chat"), ("shed", "batch"),
                                              ("shed", None)])
async def test_without_shed_or_a_target_the_request_queues(overload, profile):
    sched, release, task = await busy_model(overload, profile)
    seen = []

    async def queued():
        async with sched.lease("a") as lease:
            seen.append(lease.estimated_wait_ms)
    waiting = asyncio.create_task(queued())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    release.set()
    await asyncio.gather(task, waiting)
    assert seen == [5000.0]          # one request ahead x 5 s


def make_app(server: str = ""):
    require_smollm2()
    text = (f'models_dir = "{MODELS_DIR}"\n{server}\n[[models]]\nid = "chat"\n'
            f'modality = "text_generation"\nengine = "ggml_llama"\nweights_path = "{GGUF}"\n'
            "context_len = 2048\n")
    return create_app(parse_config(tomllib.loads(text)), catalog=load_catalog(), stage=False)
