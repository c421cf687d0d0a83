"""A paused answer (``ChatRequest.pause``, what a realtime answer sets while its sentence is
spoken on the same cores) takes no decode step while the pause is set, keeps its slot, goes
on when it is cleared, and still ends at once when cancelled. Runs on the tiny generated
llama: proves the loop's behaviour, not a speed."""
import threading
import time

import pytest

from conftest import require_smollm2
from tiny_llama import load_tiny_engine
from hypnos.engines.records import ChatRequest

pytestmark = pytest.mark.real
MESSAGES = [{"role": "user", "content": "Count to ten."}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    eng = load_tiny_engine(tmp_path_factory.mktemp("pause"), require_smollm2(), slots=2,
                           threads=1)
    yield eng
    eng.unload()


def start(engine, pause: threading.Event | None, cancel: threading.Event | None = None):
    """The answer on a thread: (its thread, the texts streamed, a box for its result)."""
    texts: list[str] = []
    box: dict = {}
    req = ChatRequest(messages=MESSAGES, max_tokens=24, temperature=0, pause=pause)

    def run():
        box["result"] = engine.chat(req, lambda delta: texts.append(delta.content
                                                                 + delta.reasoning),
                                    cancel or threading.Event())
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, texts, box


def test_a_paused_answer_waits_and_then_goes_on(engine):
    pause = threading.Event()
    pause.set()
    thread, texts, box = start(engine, pause)
    time.sleep(0.5)
    # Nothing is written while paused, whatever the machine's speed; a plain request beside
    # it is answered meanwhile (the loop is not stuck on it).
    assert texts == [] and "result" not in box
    beside = engine.chat(ChatRequest(messages=MESSAGES, max_tokens=4, temperature=0), None,
                         threading.Event())
    assert beside.completion_tokens > 0
    assert texts == [] and thread.is_alive()
    pause.clear()
    thread.join(60)
    result = box["result"]
    assert result.completion_tokens > 0 and result.finish_reason in ("stop", "length")
    assert "".join(texts) == result.text


def test_a_paused_answer_is_cancelled_at_once(engine):
    pause, cancel = threading.Event(), threading.Event()
    pause.set()
    thread, texts, box = start(engine, pause, cancel)
    time.sleep(0.2)
    cancel.set()
    thread.join(30)
    assert not thread.is_alive()
    assert box["result"].finish_reason == "cancelled" and texts == []
