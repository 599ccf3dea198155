"""controller-runtime's priority-queue behaviours (controller-runtime.md §3.1), on both shells."""

from __future__ import annotations

import math
from typing import Any

import pytest

from keyqueue import AddResult, FakeClock, ItemExponentialFailureRateLimiter, ShutDown
from tests.shells import Key


def drain(q: Any) -> list[tuple[Any, int]]:
    """Every key that can be handed out now, as (key, priority), each done at once."""
    out: list[tuple[Any, int]] = []
    while True:
        try:
            key, prio = q.get_with_priority(timeout=0)
        except (TimeoutError, ShutDown):
            return out
        out.append((key, prio))
        q.done(key)


def test_order_by_priority_then_fifo(make_pq: Any) -> None:
    q = make_pq()
    for key, prio in [("a", 0), ("b", 5), ("c", -3), ("d", 5), ("e", 0), ("f", 10)]:
        assert q.add(key, priority=prio) == AddResult.QUEUED
    assert drain(q) == [("f", 10), ("b", 5), ("d", 5), ("a", 0), ("e", 0), ("c", -3)]


def test_plain_get_and_default_priority(make_pq: Any) -> None:
    q = make_pq()
    q.add("a")
    q.add("b", priority=1)
    assert q.get(timeout=0) == "b"
    assert q.get_with_priority(timeout=0) == ("a", 0)


def test_dedup_of_a_ready_key(make_pq: Any) -> None:
    q = make_pq()
    assert q.add("a") == AddResult.QUEUED
    assert q.add("b") == AddResult.QUEUED
    for _ in range(100):
        assert q.add("a") == AddResult.DEDUP
    assert len(q) == 2
    assert drain(q) == [("a", 0), ("b", 0)]


def test_locked_key_is_skipped_and_returned_right_after_done(make_pq: Any) -> None:
    q = make_pq()
    q.add("a")
    assert q.get(timeout=0) == "a"
    assert q.add("a") == AddResult.MARKED  # re-added while being processed: ready, but locked
    assert q.add("a") == AddResult.DEDUP
    q.add("b")
    q.add("c")
    assert len(q) == 3  # controller-runtime's Len counts the locked ready key
    assert q.get_with_priority(timeout=0) == ("b", 0)  # "a" is first in line but locked: skipped
    assert q.done("a") is True  # unlocked: it takes its old place, ahead of "c"
    assert len(q) == 2
    assert q.get(timeout=0) == "a"
    assert q.get(timeout=0) == "c"
    assert len(q) == 0


def test_only_locked_keys_ready_means_nothing_to_hand_out(make_pq: Any) -> None:
    q = make_pq()
    q.add("a")
    q.add("b")
    assert q.get(timeout=0) == "a"
    assert q.get(timeout=0) == "b"
    q.add("b", priority=1)
    q.add("a")
    assert len(q) == 2
    with pytest.raises(TimeoutError):
        q.get(timeout=0)
    assert q.done("a") is True
    assert q.done("b") is True
    assert drain(q) == [("b", 1), ("a", 0)]


def test_highest_priority_is_retained(make_pq: Any) -> None:
    q = make_pq()
    assert q.add("a", priority=5) == AddResult.QUEUED
    assert q.add("a", priority=1) == AddResult.DEDUP
    assert q.add("a") == AddResult.DEDUP
    assert q.add("a", priority=-100) == AddResult.DEDUP
    q.add("b", priority=4)
    assert drain(q) == [("a", 5), ("b", 4)]


def test_plain_add_raises_a_low_priority_key(make_pq: Any) -> None:
    q = make_pq()
    q.add("x", priority=-100)
    q.add("y", priority=-50)
    assert q.add("x") == AddResult.QUEUED  # nil priority means 0, which is higher than -100
    assert drain(q) == [("x", 0), ("y", -50)]


def test_bump_re_fifos_within_the_new_priority(make_pq: Any) -> None:
    q = make_pq()
    q.add("a", priority=0)
    q.add("b", priority=1)
    q.add("c", priority=1)
    assert q.add("a", priority=1) == AddResult.QUEUED  # back of priority 1's line
    q.add("d", priority=1)
    assert drain(q) == [("b", 1), ("c", 1), ("a", 1), ("d", 1)]


def test_equal_or_lower_priority_keeps_the_place(make_pq: Any) -> None:
    q = make_pq()
    q.add("a", priority=1)
    q.add("b", priority=1)
    assert q.add("a", priority=1) == AddResult.DEDUP
    assert q.add("a", priority=0) == AddResult.DEDUP
    assert drain(q) == [("a", 1), ("b", 1)]


def test_bump_of_a_locked_key_applies_after_done(make_pq: Any) -> None:
    q = make_pq()
    q.add("a")
    assert q.get(timeout=0) == "a"
    assert q.add("a", priority=0) == AddResult.MARKED
    assert q.add("a", priority=7) == AddResult.MARKED  # priority raised while locked
    q.add("b", priority=7)
    assert q.get_with_priority(timeout=0) == ("b", 7)
    assert q.done("a") is True
    assert q.get_with_priority(timeout=0) == ("a", 7)


def test_earliest_ready_time_wins(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    assert q.add("a", after=10) == AddResult.DELAYED
    assert q.add("a", after=20) == AddResult.DELAY_KEPT
    assert q.add("a", after=5) == AddResult.DELAYED
    clock.step(4.999)
    assert len(q) == 0
    clock.step(0.001)
    assert len(q) == 1
    assert drain(q) == [("a", 0)]
    clock.step(100)
    assert len(q) == 0  # the superseded 10 s and 20 s entries do not fire


def test_a_ready_key_stays_ready(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("a")
    assert q.add("a", after=10) == AddResult.DEDUP
    assert q.add("a", rate_limited=True) == AddResult.DEDUP
    assert len(q) == 1
    assert q.add("a", after=10, priority=3) == AddResult.QUEUED  # not delayed, but the priority still rises
    assert drain(q) == [("a", 3)]
    clock.step(100)
    assert len(q) == 0  # and nothing fires later: the delayed adds merged into the ready entry


def test_immediate_add_makes_a_waiting_key_ready_at_that_moment(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("w", after=10, priority=2)
    q.add("x", priority=1)
    q.add("y", priority=1)
    assert len(q) == 2
    assert q.add("w", priority=1) == AddResult.QUEUED  # ready now, at the higher priority (2)
    q.add("z", priority=2)
    assert len(q) == 4
    assert drain(q) == [("w", 2), ("z", 2), ("x", 1), ("y", 1)]
    clock.step(10)
    assert len(q) == 0  # its waiting entry is gone


def test_delayed_key_joins_the_fifo_when_it_becomes_ready(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("early", after=1)  # added first, but ready only at t=1
    q.add("a")
    clock.step(1)
    q.add("b")
    assert drain(q) == [("a", 0), ("early", 0), ("b", 0)]


def test_due_keys_become_ready_in_time_then_priority_order(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("late-high", after=2, priority=9)
    q.add("early-low", after=1, priority=0)
    q.add("early-high", after=1, priority=5)
    clock.step(3)
    q.add("now", priority=0)
    # Priority first; within priority 0, "early-low" became ready (t=1..3, promoted in time order) before "now".
    assert drain(q) == [("late-high", 9), ("early-high", 5), ("early-low", 0), ("now", 0)]


def test_waiting_key_keeps_higher_priority_and_earlier_time(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("a", after=5, priority=1)
    assert q.add("a", after=10, priority=3) == AddResult.DELAYED  # priority raised, time kept at 5
    assert q.add("a", after=10, priority=2) == AddResult.DELAY_KEPT
    clock.step(5)
    assert drain(q) == [("a", 3)]


def test_delayed_keys_not_in_len(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("a", after=1)
    q.add("b", after=math.inf)
    q.add("c")
    assert len(q) == 1
    clock.step(1)
    assert len(q) == 2


def test_len_counts_keys_re_added_while_processing(make_pq: Any) -> None:
    q = make_pq()
    q.add("a")
    q.get(timeout=0)
    assert len(q) == 0
    q.add("a")
    assert len(q) == 1
    with pytest.raises(TimeoutError):
        q.get(timeout=0)  # counted, but not available until done
    assert q.done("a") is True
    assert q.get(timeout=0) == "a"
    assert q.done("a") is False
    assert len(q) == 0


def test_key_re_added_with_delay_while_processing(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("a")
    q.get(timeout=0)
    assert q.add("a", after=1) == AddResult.DELAYED
    assert q.done("a") is False  # waiting, not ready
    clock.step(1)
    assert q.get(timeout=0) == "a"
    clock.step(0)
    q.add("b")
    q.add("b", after=0)  # after <= 0 is "now": dedup
    assert len(q) == 1


def test_delayed_key_due_while_processing_waits_for_done(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("a")
    q.get(timeout=0)
    q.add("a", after=1)
    clock.step(1)
    assert len(q) == 1
    with pytest.raises(TimeoutError):
        q.get(timeout=0)
    assert q.done("a") is True
    assert q.get(timeout=0) == "a"


def test_spurious_done_is_harmless(make_pq: Any) -> None:
    q = make_pq()
    assert q.done("never-seen") is False
    q.add("a")
    assert q.done("a") is False  # queued, not processing: no duplicate (client-go's Q1 does not apply)
    assert len(q) == 1
    assert q.get(timeout=0) == "a"
    with pytest.raises(TimeoutError):
        q.get(timeout=0)
    assert q.done("a") is False
    assert q.done("a") is False


def test_rate_limited_takes_the_smaller_delay(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(ItemExponentialFailureRateLimiter(1.0, 1000.0), clock=clock)
    # limiter: 1, 2, 4, 8 ... seconds
    assert q.add("a", rate_limited=True) == AddResult.DELAYED  # after unset: limiter's 1 s
    assert q.num_requeues("a") == 1  # synchronous: exact right after the call
    clock.step(0.999)
    assert len(q) == 0
    clock.step(0.001)
    assert drain(q) == [("a", 0)]

    q.add("b", rate_limited=True, after=0.5)  # limiter says 1 s; after 0.5 is smaller
    q.add("c", rate_limited=True, after=5)  # limiter says 1 s; smaller than 5
    assert q.num_requeues("b") == q.num_requeues("c") == 1
    clock.step(0.5)
    assert drain(q) == [("b", 0)]
    clock.step(0.5)
    assert drain(q) == [("c", 0)]

    q.add("a", rate_limited=True, after=-1)  # a negative after stays negative: ready now; limiter still called
    assert q.num_requeues("a") == 2
    assert drain(q) == [("a", 0)]


def test_rate_limited_add_with_priority_and_forget(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(ItemExponentialFailureRateLimiter(1.0, 1000.0), clock=clock)
    assert q.add_rate_limited("a", priority=4) == AddResult.DELAYED
    assert q.add_rate_limited("a") == AddResult.DELAY_KEPT  # 2 s > 1 s: kept; the failure is still counted
    assert q.num_requeues("a") == 2
    q.forget("a")
    assert q.num_requeues("a") == 0
    clock.step(1)
    assert drain(q) == [("a", 4)]


def test_add_after_merges_instead_of_duplicating(make_pq: Any) -> None:
    # client-go's Q5 (a plain add does not cancel an AddAfter: processed twice) does not apply to the PQ.
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add_after("a", 1, priority=2)
    q.add("a")
    assert drain(q) == [("a", 2)]
    clock.step(5)
    assert drain(q) == []


def test_default_limiter_is_exponential_without_bucket(make_pq: Any) -> None:
    q = make_pq()
    delays = [q.rate_limiter.when(f"k{i}") for i in range(300)]  # a bucket (burst 100) would delay the 101st
    assert set(delays) == {0.005}


def test_shutdown_hands_out_what_is_left_then_raises(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock)
    q.add("a", priority=1)
    q.add("b", priority=2)
    q.add("w", after=1)
    q.add("p")
    assert q.get(timeout=0) == "b"
    q.done("b")
    q.shut_down()
    q.shut_down()  # idempotent
    assert q.shutting_down
    assert q.add("c", priority=100) == AddResult.DROPPED
    assert q.add("w") == AddResult.DROPPED
    clock.step(10)
    assert drain(q) == [("a", 1), ("p", 0)]  # the waiting key was dropped
    with pytest.raises(ShutDown):
        q.get(timeout=0)


def test_shutdown_keeps_a_key_re_added_while_processing(make_pq: Any) -> None:
    q = make_pq()
    q.add("a")
    q.get(timeout=0)
    q.add("a", priority=3)
    q.shut_down()
    with pytest.raises(ShutDown):
        q.get(timeout=0)  # a is locked; nothing else: ShutDown (as the plain queue with a marked key)
    assert q.done("a") is True
    assert q.get_with_priority(timeout=0) == ("a", 3)
    q.done("a")
    with pytest.raises(ShutDown):
        q.get(timeout=0)


def test_limiter_not_consulted_after_shutdown(make_pq: Any) -> None:
    q = make_pq()
    q.shut_down()
    assert q.add_rate_limited("a") == AddResult.DROPPED
    assert q.num_requeues("a") == 0


def test_shut_down_with_drain_finishes_re_added_keys(make_pq: Any) -> None:
    q = make_pq()
    q.add("a")
    key = q.get(timeout=0)
    q.add("a")
    q.done(key)  # re-queued
    assert q.shut_down_with_drain(timeout=0) is False  # "a" still ready
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert q.shut_down_with_drain(timeout=0) is True


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"priority": 1.5}, TypeError),
        ({"priority": True}, TypeError),
        ({"priority": "1"}, TypeError),
        ({"after": "1"}, TypeError),
        ({"after": math.nan}, ValueError),
        ({"after": math.nan, "rate_limited": True}, ValueError),
    ],
)
def test_bad_input_raises_and_changes_nothing(make_pq: Any, kwargs: dict[str, Any], exc: type[Exception]) -> None:
    q = make_pq()
    q.add("a")
    with pytest.raises(exc, match=r"priority|after|delay|NaN"):
        q.add("a", **kwargs)
    with pytest.raises(TypeError, match="unhashable list"):
        q.add(["x"], priority=1)
    assert len(q) == 1
    assert q.num_requeues("a") == 0  # the limiter recorded nothing
    assert drain(q) == [("a", 0)]


def test_stats_count_decisions(make_pq: Any) -> None:
    clock = FakeClock()
    q = make_pq(clock=clock, stats=True)
    q.add("a")  # queued
    q.add("a")  # dedup
    q.add("a", priority=1)  # queued (raised)
    q.get(timeout=0)
    q.add("a")  # marked
    q.done("a")  # redelivered
    q.add("b", after=1)  # delayed
    clock.step(1)  # fired → queued
    assert len(q) == 2
    q.shut_down()
    q.add("c")  # dropped
    s = q.stats()
    assert (s.adds, s.queued, s.deduplicated, s.marked, s.dropped) == (6, 3, 1, 1, 1)
    assert (s.redelivered, s.gets, s.dones, s.delayed, s.fired) == (1, 1, 1, 1, 1)


def test_repr_and_unstatted_queue(make_pq: Any) -> None:
    q = make_pq(name="pq")
    q.add("a")
    assert "ready=1" in repr(q)
    with pytest.raises(RuntimeError, match="stats=True"):
        q.stats()


@pytest.mark.parametrize("supersede", ["raised priority", "moved earlier"])
def test_no_reference_kept_after_done_when_an_entry_was_superseded(supersede: str) -> None:
    import gc
    import weakref

    from keyqueue import FakeClock, PriorityQueue

    clock = FakeClock()
    q: PriorityQueue[Key] = PriorityQueue(clock=clock)
    key = Key("a")
    ref = weakref.ref(key)
    if supersede == "raised priority":
        q.add(key, priority=0)
        q.add(key, priority=5)  # the priority-0 heap entry is superseded
    else:
        q.add(key, after=10.0)
        q.add(key, after=1.0)  # the 10 s waiting entry is superseded
        clock.step(1.0)
    got = q.get(timeout=1)
    q.done(got)
    del key, got
    gc.collect()
    assert ref() is None
