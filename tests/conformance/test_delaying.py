"""Conformance: the delaying queue (client-go delaying_queue.go), with the injectable FakeClock."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from keyqueue import AddResult, FakeClock, ShutDown


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
    t.join(0.05)
    assert t.is_alive()  # nothing due yet; a fake clock never times out by itself
    clock.step(5.0)
    t.join(5)
    assert got == ["a"]


def test_earlier_entry_rewakes_a_get_waiting_on_real_time(make_queue: Any) -> None:
    q = make_queue("delaying")  # real clock
    q.add_after("late", 3600.0)
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=5)))
    t.start()
    t.join(0.02)
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
