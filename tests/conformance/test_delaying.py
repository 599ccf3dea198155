"""Conformance: the delaying queue (client-go delaying_queue.go), with the injectable FakeClock."""

from __future__ import annotations

import gc
import math
import threading
import weakref
from typing import Any

import pytest

from keyqueue import AddResult, Clock, FakeClock, ShutDown
from tests.shells import Key, wait_for_getters


def test_add_after_fires_exactly_when_due(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    assert q.add_after("a", 1.0) == AddResult.DELAYED
    assert len(q) == 0
    clock.step(0.5)
    assert len(q) == 0
    clock.step(0.5)  # readyAt <= now fires
    assert len(q) == 1
    assert q.get(timeout=1) == "a"


def test_non_positive_delay_adds_now(make_queue: Any) -> None:
    q = make_queue("delaying", clock=FakeClock())
    assert q.add_after("a", 0) == AddResult.QUEUED
    assert q.add_after("b", -1.5) == AddResult.QUEUED
    assert q.add_after("a", 0.0) == AddResult.DEDUP
    assert len(q) == 2


def test_earliest_delay_wins(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    assert q.add_after("a", 2.0) == AddResult.DELAYED
    assert q.add_after("a", 1.0) == AddResult.DELAYED  # moves earlier
    assert q.add_after("a", 3.0) == AddResult.DELAY_KEPT  # later: ignored
    clock.step(1.0)
    assert len(q) == 1
    assert q.get(timeout=1) == "a"
    q.done("a")
    clock.step(5.0)
    assert len(q) == 0  # only one entry ever existed for "a"


def test_due_entries_come_out_in_time_order(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    q.add_after("c", 3.0)
    q.add_after("a", 1.0)
    q.add_after("b", 2.0)
    clock.step(10.0)
    assert [q.get(timeout=1) for _ in range(3)] == ["a", "b", "c"]


def test_plain_add_does_not_cancel_a_delayed_entry(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    q.add_after("a", 1.0)
    q.add("a")
    assert q.get(timeout=1) == "a"
    q.done("a")
    assert len(q) == 0
    clock.step(1.0)
    assert len(q) == 1  # the delayed entry still fires (client-go has no cancellation)


def test_delayed_entry_of_a_processing_key_marks_it(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    q.add("a")
    a = q.get(timeout=1)
    q.add_after(a, 1.0)
    clock.step(1.0)
    assert len(q) == 0  # fired into the processing + dirty state
    assert q.done(a) is True
    assert q.get(timeout=1) == "a"


def test_step_wakes_a_waiting_get(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    q.add_after("a", 5.0)
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    t.start()
    wait_for_getters(q)  # the get() really waits (and saw the delayed entry) before the clock moves
    clock.step(4.999)
    t.join(0.02)
    assert t.is_alive() and got == []  # not due yet; a fake clock never times out by itself
    clock.step(0.001)
    t.join(5)
    assert got == ["a"]


def test_earlier_entry_rewakes_a_get_waiting_on_real_time(make_queue: Any) -> None:
    q = make_queue("delaying")  # real clock
    q.add_after("late", 3600.0)
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=5)))
    t.start()
    wait_for_getters(q)  # it sleeps for the hour-long entry now
    q.add_after("soon", 0.01)  # the waiting get must re-arm for this one, not sleep for an hour
    t.join(5)
    assert got == ["soon"]


def test_several_entries_due_at_once_wake_several_getters(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    got: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        k = q.get(timeout=10)
        with lock:
            got.append(k)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    wait_for_getters(q, 3)
    for k in ["a", "b", "c"]:
        q.add_after(k, 1.0)
    clock.step(1.0)
    for t in threads:
        t.join(5)
    assert sorted(got) == ["a", "b", "c"]


def test_infinite_delay_never_fires(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    assert q.add_after("a", math.inf) == AddResult.DELAYED
    clock.step(10**9)
    assert len(q) == 0


def test_bad_delay_and_item_raise_and_change_nothing(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    q.add_after("a", 1.0)
    with pytest.raises(ValueError, match="NaN"):
        q.add_after("b", math.nan)
    with pytest.raises(TypeError, match="str"):
        q.add_after("b", "1s")
    with pytest.raises(TypeError, match="list"):
        q.add_after(["b"], 1.0)
    clock.step(1.0)
    assert len(q) == 1
    assert q.get(timeout=1) == "a"


def test_shutdown_drops_waiting_entries(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    q.add_after("a", 1.0)
    q.add("b")
    q.shut_down()
    assert q.add_after("c", 0) == AddResult.DROPPED
    clock.step(2.0)
    assert q.get(timeout=1) == "b"
    with pytest.raises(ShutDown):
        q.get(timeout=1)


def test_real_clock_delay_is_served_without_a_background_thread(make_queue: Any) -> None:
    q = make_queue("delaying")
    before = threading.active_count()
    q.add_after("a", 0.02)
    assert threading.active_count() == before
    assert q.get(timeout=2) == "a"


@pytest.mark.parametrize("first_delay", [10.0, math.inf])
def test_no_reference_kept_after_a_delayed_entry_was_moved_earlier(make_queue: Any, first_delay: float) -> None:
    # A delayed entry moved earlier leaves its old heap slot behind; that slot must not keep the key alive once
    # the key has fired, been processed and is done (the queue keeps no reference to a finished key).
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    key = Key("a")
    ref = weakref.ref(key)
    q.add_after(key, first_delay)
    assert q.add_after(key, 1.0) == AddResult.DELAYED  # moved earlier
    clock.step(1.0)
    got = q.get(timeout=1)
    assert q.done(got) is False
    assert len(q) == 0
    del key, got
    gc.collect()
    assert ref() is None


class _UnnotifiedClock(Clock):
    """A clock moved by hand that, like the real clock, never wakes anybody when it moves: a getter learns that a
    delayed key is due only from its own timed wait (here re-checked every 5 ms of real time)."""

    def __init__(self) -> None:
        super().__init__()
        self.ns = 0

    def now_ns(self) -> int:
        return self.ns

    def real_wait(self, deadline_ns: int) -> float | None:
        return 0.005 if deadline_ns > self.ns else 0.0


def test_a_getter_that_times_out_passes_on_the_wake_up_for_an_earlier_delayed_key(
    make_queue: Any, shell: str, request: pytest.FixtureRequest
) -> None:
    # Two getters wait with nothing pending (no timer). add_after() wakes one of them (the oldest) to take on the
    # new entry's deadline. If that one leaves by its own timeout before the entry is due, the other must take
    # the deadline over; otherwise the key waits until some unrelated event (or forever).
    clock = _UnnotifiedClock()
    q = make_queue("delaying", clock=clock)
    outcomes: dict[str, Any] = {}

    def getter(name: str, timeout: float) -> None:
        try:
            outcomes[name] = q.get(timeout=timeout)
        except (TimeoutError, ShutDown) as e:
            outcomes[name] = type(e).__name__

    # 1 s: the first getter must still wait when the second one starts waiting (0.05 s was too short on a loaded
    # machine: the first had left before the second arrived, and the wait for two getters timed out)
    first = threading.Thread(target=getter, args=("first", 1.0), daemon=True)
    first.start()
    wait_for_getters(q, 1)
    second = threading.Thread(target=getter, args=("second", 30.0), daemon=True)
    second.start()
    wait_for_getters(q, 2)
    assert q.add_after("x", 1.0) == AddResult.DELAYED  # wakes the first getter, the oldest
    first.join(5)
    assert outcomes.get("first") == "TimeoutError"  # x is not due on this clock yet
    clock.ns += 1_000_000_000  # x is due now; nobody is notified (as with the real clock)
    second.join(1.0)
    assert outcomes.get("second") == "x", "the delayed key's deadline was lost when the woken getter timed out"


def test_rate_limiting_queue_default_bucket_follows_the_queue_clock(make_queue: Any) -> None:
    # client-go's bucket reads the wall clock; ours reads the queue's clock: after the burst of 100, the 101st
    # key waits 0.1 s of *queue* time and is served when the FakeClock gets there.
    clock = FakeClock()
    q = make_queue("ratelimiting", clock=clock)
    for i in range(100):
        q.add_rate_limited(f"k{i}")  # first failure of each key: 5 ms, the bucket has tokens
    assert q.add_rate_limited("late") == AddResult.DELAYED
    clock.step(0.005)
    assert len(q) == 100
    clock.step(0.094)
    assert len(q) == 100  # "late" waits for the bucket: 0.1 s on this clock
    clock.step(0.001)
    assert len(q) == 101
