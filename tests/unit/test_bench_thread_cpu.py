"""bench/thread_cpu.py: the split of a server's threads' CPU time around a prefill (pure),
and a reading of this very process (Linux: /proc)."""
import os
import sys
import threading
import time

import pytest

from hypnos.bench.thread_cpu import read, split


def test_the_busiest_threads_are_the_compute_threads_and_the_rest_is_the_hosts():
    before = {1: 10.0, 2: 10.0, 3: 5.0, 4: 0.0}
    after = {1: 19.8, 2: 19.6, 3: 5.5, 4: 0.1, 9: 0.2}          # 9: born in between
    busy, rest = split(before, after, 10.0, 2)
    assert busy == pytest.approx((9.8 + 9.6) / 20)
    assert rest == pytest.approx(0.5 + 0.1 + 0.2)


def test_nothing_read_splits_to_nothing():
    assert split({}, {}, 10.0, 2) == (0.0, 0.0)
    assert split({1: 1.0}, {1: 2.0}, 0.0, 2) == (0.0, 0.0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_reading_this_process_sees_the_calling_thread_spend_cpu():
    me = threading.get_native_id()
    before = read(os.getpid())
    end = time.thread_time() + 0.3          # this thread's own CPU time, whatever else runs
    while time.thread_time() < end:
        pass
    after = read(os.getpid())
    assert me in after
    assert after[me] - before.get(me, 0.0) >= 0.2
