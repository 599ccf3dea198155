"""Conformance: shutdown and drain, including keyqueue's deliberate fixes of client-go's drain."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from keyqueue import AddResult, FakeClock, ShutDown
from tests.shells import wait_for_getters, wait_until


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def _start_drain(q: Any, timeout: float | None = 10) -> tuple[threading.Thread, list[Any]]:
    """Call ``shut_down_with_drain(timeout)`` in a thread and return once it has really started: the queue is
    shutting down and (``len`` takes the queue's lock) the drain has made its first idle check."""
    t, out = _in_thread(lambda: q.shut_down_with_drain(timeout=timeout))
    wait_until(lambda: q.shutting_down, what="the drain to start")
    len(q)
    return t, out


def _still_waiting(t: threading.Thread, out: list[Any]) -> bool:
    t.join(0.05)  # a drain that wrongly returned has had ample time to finish
    return t.is_alive() and out == []


def test_drain_of_an_idle_queue_returns_at_once(make_queue: Any) -> None:
    q = make_queue()
    assert q.shut_down_with_drain(timeout=1) is True
    assert q.shutting_down


def test_drain_waits_for_queued_keys_not_only_in_flight(make_queue: Any) -> None:
    # client-go returns while keys are still queued; we wait until they are handed out and done.
    q = make_queue()
    q.add("a")
    q.add("b")
    t, out = _start_drain(q)
    assert _still_waiting(t, out)  # nothing in flight, but two keys queued
    assert q.add("c") == AddResult.DROPPED  # adds are refused during the drain
    a = q.get(timeout=1)
    q.done(a)
    assert _still_waiting(t, out)  # b still queued
    b = q.get(timeout=1)
    assert _still_waiting(t, out)  # b in flight
    q.done(b)
    t.join(5)
    assert out == [True]
    with pytest.raises(ShutDown):
        q.get(timeout=1)


def test_key_re_added_during_processing_is_handed_out_during_the_drain(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    a = q.get(timeout=1)
    q.add(a)  # processing + dirty, before the drain starts
    t, out = _start_drain(q)
    assert _still_waiting(t, out)
    assert q.done(a) is True  # re-queued even though shutting down
    assert _still_waiting(t, out)  # client-go's drain returns here, with "a" still queued
    assert q.get(timeout=1) == "a"
    q.done("a")
    t.join(5)
    assert out == [True]


def test_two_drain_callers_both_return(make_queue: Any) -> None:
    # client-go's Done signals one waiter only; every caller must return.
    q = make_queue()
    q.add("a")
    a = q.get(timeout=1)
    t1, out1 = _start_drain(q)
    t2, out2 = _start_drain(q)
    assert _still_waiting(t1, out1) and _still_waiting(t2, out2)
    q.done(a)
    t1.join(5)
    t2.join(5)
    assert out1 == [True] and out2 == [True]


def test_shut_down_releases_a_waiting_drain(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    q.get(timeout=1)  # never done
    t, out = _start_drain(q, timeout=None)
    assert _still_waiting(t, out)
    q.shut_down()
    t.join(5)
    assert out == [False]


def test_drain_timeout_returns_false(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    q.get(timeout=1)
    assert q.shut_down_with_drain(timeout=0.02) is False
    assert q.shutting_down


def test_shut_down_does_not_wait_for_in_flight_keys(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    q.get(timeout=1)
    q.shut_down()  # returns although "a" is never done
    assert q.shutting_down


def test_getters_blocked_at_drain_are_woken(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    a = q.get(timeout=1)
    results: list[str] = []

    def getter() -> None:
        try:
            q.get(timeout=10)
            results.append("item")
        except ShutDown:
            results.append("shutdown")

    g = threading.Thread(target=getter, daemon=True)
    g.start()
    wait_for_getters(q)
    d, out = _start_drain(q)
    g.join(5)
    assert results == ["shutdown"]
    q.done(a)
    d.join(5)
    assert out == [True]


def test_drain_drops_delayed_entries_and_does_not_wait_for_them(make_queue: Any) -> None:
    clock = FakeClock()
    q = make_queue("delaying", clock=clock)
    q.add_after("later", 1.0)
    q.add("now")
    t, out = _start_drain(q)
    assert q.get(timeout=1) == "now"
    q.done("now")
    t.join(5)
    assert out == [True]  # "later" was dropped at shutdown, not waited for
    clock.step(2.0)
    assert len(q) == 0
    with pytest.raises(ShutDown):
        q.get(timeout=1)


def test_drain_timeout_is_validated_before_anything_changes(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    with pytest.raises(ValueError):
        q.shut_down_with_drain(timeout=float("nan"))
    with pytest.raises(TypeError):
        q.shut_down_with_drain(timeout="1")
    assert not q.shutting_down
    assert q.add("b") == AddResult.QUEUED


def test_drain_after_shut_down_returns_when_idle(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    q.shut_down()
    t, out = _start_drain(q)
    assert _still_waiting(t, out)  # "a" is still queued: a drain after shut_down() waits for it too
    q.done(q.get(timeout=1))
    t.join(5)
    assert out == [True]
