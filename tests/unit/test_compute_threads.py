"""``compute_threads.on_own_thread``: a one-off llama computation runs on a thread of its own
that has ended when the call returns (so its OpenMP team is gone with it)."""
import threading

import pytest

from hypnos.engines.llama.compute_threads import on_own_thread


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
