"""The one map to HTTP is complete: every engine error (``errors.from_engine``) and every
refusal of the scheduler (``errors.from_refusal``) has a status the published document
describes, and none falls through to the generic 500 but the engine's plain failure. A new
`EngineError` subclass or `Refused` subclass fails here until it is mapped (and, for one this
test cannot build, given an example below)."""
import inspect
import typing

import pytest

from hypnos.engines import errors as eng
from hypnos.planner.loading import LoadRefusal, NoRoom, OverProcessCap, TooBig
from hypnos.service import errors
from hypnos.service.http.openapi import DESCRIPTIONS, INFERENCE_ERRORS
from hypnos.service import refusals

# Examples of the classes whose constructor takes more than a message.
ENGINE_EXAMPLES = {
    eng.EngineUnavailable: lambda: eng.EngineUnavailable("kokoro", "speech"),
    eng.EngineNotBuilt: lambda: eng.EngineNotBuilt("vllm", "text_generation"),
    eng.ContextOverflow: lambda: eng.ContextOverflow("too long", prompt_tokens=9000, cap=8192),
}
REFUSAL_VALUES = {
    refusals.WorkersBusy: refusals.WorkersBusy(("other",)),
}
GENERIC = "The engine failed"
LOAD_REFUSALS = (*typing.get_args(LoadRefusal), refusals.WorkersBusy)


def subclasses(root: type) -> list[type]:
    found, todo = [], [root]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: c.__qualname__)


def engine_example(cls: type[eng.EngineError]) -> eng.EngineError:
    if cls in ENGINE_EXAMPLES:
        return ENGINE_EXAMPLES[cls]()
    try:
        return cls("what went wrong")
    except TypeError:
        pytest.fail(f"{cls.__name__} needs an example in ENGINE_EXAMPLES")


def load_refusal_example(kind: type) -> refusals.Refusal:
    if kind in REFUSAL_VALUES:
        return REFUSAL_VALUES[kind]
    fields = inspect.signature(kind).parameters
    return kind(**{name: 1 << 30 if name.endswith("bytes") else "why" for name in fields})


def refusal_examples() -> list[refusals.Refused]:
    out: list[refusals.Refused] = []
    for cls in subclasses(refusals.Refused):
        if cls is refusals.Refused:
            continue
        if cls is refusals.LoadRefused:
            out += [cls("m", load_refusal_example(k)) for k in LOAD_REFUSALS]
        elif cls is refusals.LoadFailed:
            out += [cls("m", engine_example(k)) for k in subclasses(eng.EngineError)]
        else:
            out.append(cls("no", retry_after_s=3))
    return out


@pytest.mark.parametrize("cls", subclasses(eng.EngineError), ids=lambda c: c.__name__)
def test_every_engine_error_maps_to_a_documented_status(cls):
    mapped = errors.from_engine(engine_example(cls), param="input", window=4096)
    assert isinstance(mapped, errors.HypnosError)
    assert mapped.status in DESCRIPTIONS, (cls.__name__, mapped.status)
    if cls is eng.EngineError:
        assert (mapped.status, mapped.message) == (500, f"{GENERIC}: what went wrong")
    else:
        assert not mapped.message.startswith(GENERIC), f"{cls.__name__} is not mapped"


def test_the_engine_plain_failure_and_the_unavailable_engine():
    """The two an engine call or a load may raise that used to disagree: a missing library
    raised during a call was the generic 500; it is the 503 a load gives."""
    assert errors.from_engine(eng.EngineError("boom")).status == 500
    missing = errors.from_engine(eng.EngineUnavailable("kokoro", "speech"))
    assert (missing.status, missing.type) == (503, "model_not_available")
    assert "pip install 'hypnos[speech]'" in missing.message


def example_id(exc: refusals.Refused) -> str:
    inner = getattr(exc, "refusal", None) or getattr(exc, "error", None)
    return type(exc).__name__ + ("" if inner is None else f"-{type(inner).__name__}")


@pytest.mark.parametrize("exc", refusal_examples(), ids=example_id)
def test_every_refusal_maps_to_a_status_every_leasing_route_declares(exc):
    mapped = errors.from_refusal(exc)
    assert mapped.status in INFERENCE_ERRORS, (exc, mapped.status)
    assert mapped.message and not mapped.message.startswith(GENERIC)
    if exc.retry_after_s is not None:
        assert mapped.headers["Retry-After"] == str(exc.retry_after_s)


def test_a_worker_lost_reads_the_same_at_load_and_mid_call():
    lost = eng.WorkerLost("RPC worker 10.0.0.2:50052 stopped answering")
    at_load = errors.from_refusal(refusals.LoadFailed("chat", lost))
    mid_call = errors.from_engine(lost)
    assert (at_load.status, at_load.type, at_load.message, at_load.headers) == \
        (mid_call.status, mid_call.type, mid_call.message, mid_call.headers)
    assert at_load.headers == {"Retry-After": "5"} and "10.0.0.2:50052" in at_load.message


def test_load_refusals_keep_their_507_types():
    types = {kind: errors.from_refusal(refusals.LoadRefused("m", load_refusal_example(kind)))
             for kind in LOAD_REFUSALS}
    assert isinstance(types[TooBig], errors.DoesNotFitAlone)
    assert {k: (v.status, v.type) for k, v in types.items()} == {
        TooBig: (507, "insufficient_vram_or_ram"), NoRoom: (507, "insufficient_vram_or_ram"),
        refusals.WorkersBusy: (507, "insufficient_vram_or_ram"),
        OverProcessCap: (507, "process_memory_cap")}
