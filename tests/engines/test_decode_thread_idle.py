"""The decode thread lives only while there is work (``compute_threads``): an idle decode
loop ends its thread, and with it the OpenMP team llama.cpp's CPU compute made, so an idle
model cannot slow another model's decode; the next request starts a new thread and is
answered as before. Runs on the tiny generated llama with 2 compute threads (a team exists
only with more than one). Proves the threads' life cycle, not a speed: the speed is
``bench/llama_server.py --default-model``'s."""
import os
import threading
import time

import pytest

from conftest import require_smollm2
from near_tie import assert_same_or_a_near_tie
from tiny_llama import load_tiny_engine
from hypnos.engines.records import ChatRequest

pytestmark = pytest.mark.real


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def wait_for(check, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    eng = load_tiny_engine(tmp_path_factory.mktemp("idle"), require_smollm2(), slots=2,
                           threads=2)
    yield eng
    eng.unload()


def ask(eng):
    return eng.chat(ChatRequest(messages=[{"role": "user", "content": "Count to ten."}],
                                max_tokens=16, temperature=0, logprobs=True, top_logprobs=2),
                    None, threading.Event())


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_an_idle_loop_ends_its_thread_and_its_compute_team(engine):
    loop = engine._loop
    assert wait_for(lambda: loop.thread is None)        # loaded, nothing asked yet
    baseline = os_threads()
    first = ask(engine)
    assert first.completion_tokens > 0
    # The decode thread and its OpenMP worker existed; both end once the loop is idle.
    assert wait_for(lambda: loop.thread is None)
    assert wait_for(lambda: os_threads() <= baseline), (os_threads(), baseline)
    second = ask(engine)                                 # a new thread serves it
    # The same answer, or one parting where two tokens were nearly tied: the second ask
    # reuses the first's cached prefix, another batch shape.
    assert_same_or_a_near_tie(first, second)
    assert second.completion_tokens > 0


def test_calls_and_parking_start_a_thread_when_none_runs(engine):
    loop = engine._loop
    assert wait_for(lambda: loop.thread is None)
    assert loop.call(lambda: 7) == 7                     # starts a thread for the call
    # A parked conversation round trip goes through call() on a fresh thread too.
    ask(engine)
    assert wait_for(lambda: loop.thread is None)
    parked = engine.park()
    assert parked.tokens > 0
