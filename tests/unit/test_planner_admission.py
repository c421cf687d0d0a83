"""admit and implicit_deadline: the queue bound first, then the deadline against the
estimate."""
from hypnos.planner.admission import (Admitted, DeadlineMiss, QueueFull, admit,
                                      implicit_deadline)


def test_queue_full_counts_only_the_requests_beyond_the_slots():
    # 3 admitted, 1 slot: 2 queued; max 2 -> full. 2 admitted: 1 queued -> admitted.
    assert admit(leases=3, slots=1, max_queue=2, estimated_wait_ms=None,
                 deadline_ms=None) == QueueFull(queued=2, max_queue=2)
    assert admit(leases=2, slots=1, max_queue=2, estimated_wait_ms=None,
                 deadline_ms=None) == Admitted(None)
    # 3 admitted on 4 slots: nothing queued.
    assert admit(leases=3, slots=4, max_queue=1, estimated_wait_ms=None,
                 deadline_ms=None) == Admitted(None)


def test_the_queue_bound_is_checked_before_the_deadline():
    assert isinstance(admit(leases=5, slots=1, max_queue=1, estimated_wait_ms=9999.0,
                            deadline_ms=1.0), QueueFull)


def test_deadline_miss_and_its_retry_after():
    miss = admit(leases=1, slots=1, max_queue=8, estimated_wait_ms=5000.0, deadline_ms=1000.0)
    assert miss == DeadlineMiss(estimated_wait_ms=5000.0, deadline_ms=1000.0)
    assert miss.retry_after_s == 5
    assert DeadlineMiss(1600.0, 1.0).retry_after_s == 2          # rounded
    assert DeadlineMiss(300.0, 1.0).retry_after_s == 1           # at least 1


def test_admitted_when_the_estimate_meets_the_deadline_or_either_is_unknown():
    assert admit(leases=0, slots=1, max_queue=8, estimated_wait_ms=1000.0,
                 deadline_ms=1000.0) == Admitted(1000.0)
    assert admit(leases=0, slots=1, max_queue=8, estimated_wait_ms=None,
                 deadline_ms=1.0) == Admitted(None)
    assert admit(leases=0, slots=1, max_queue=8, estimated_wait_ms=5000.0,
                 deadline_ms=None) == Admitted(5000.0)


def test_implicit_deadline_only_when_shedding_with_a_target():
    assert implicit_deadline("shed", 1000) == 1000
    assert implicit_deadline("queue", 1000) is None
    assert implicit_deadline("shed", None) is None
