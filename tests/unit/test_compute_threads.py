"""``compute_threads.on_own_thread``: a one-off llama computation runs on a thread of its own
that has ended when the call returns (so its OpenMP team is gone with it); ``in_background``
puts housekeeping threads (the prompt cache's writer) below every compute thread."""
import os
import threading

import pytest

from hypnos.engines.llama.compute_threads import in_background, on_own_thread
from hypnos.engines.llama.prompt_cache import PromptCache


def test_the_result_comes_back_from_another_thread_that_has_ended():
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert on_own_thread(work) == 42
    assert seen and seen[0] is not threading.current_thread()
    assert not seen[0].is_alive()


def test_the_functions_exception_is_raised_in_the_caller():
    def fail() -> None:
        raise ValueError("no such document")

    with pytest.raises(ValueError, match="no such document"):
        on_own_thread(fail)


def test_a_none_result_is_a_result():
    assert on_own_thread(lambda: None) is None


needs_sched_idle = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"),
                                      reason="SCHED_IDLE is Linux's")


@needs_sched_idle
def test_in_background_lowers_only_the_calling_thread():
    seen: dict[str, int | bool] = {}

    def work() -> None:
        seen["took"] = in_background()
        seen["policy"] = os.sched_getscheduler(0)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == {"took": True, "policy": os.SCHED_IDLE}
    assert os.sched_getscheduler(0) != os.SCHED_IDLE


@needs_sched_idle
def test_the_prompt_cache_writer_runs_in_the_background(tmp_path):
    """The writer hashes and writes each entry beside the compute: it must never preempt a
    ggml thread (on 2 cores a prefill after a stash ran ~4 % slower at normal priority)."""
    cache = PromptCache(ram_bytes=1 << 20, disk_bytes=1 << 20, folder=tmp_path)
    cache.attach("m", "id")
    cache.put("m", "id", "p", list(range(300)), bytearray(4096), [], None)
    assert cache.flush()
    writer = next(t for t in threading.enumerate() if t.name == "prompt-cache-writer")
    assert os.sched_getscheduler(writer.native_id) == os.SCHED_IDLE
    cache.close()
