"""Conformance: shutdown and drain, including keyqueue's deliberate fixes of client-go's drain."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from keyqueue import ShutDown


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def test_drain_of_an_idle_queue_returns_at_once(make_queue: Any) -> None:
    q = make_queue()
    assert q.shut_down_with_drain(timeout=1) is True
    assert q.shutting_down


def test_drain_waits_for_queued_keys_not_only_in_flight(make_queue: Any) -> None:
    # client-go returns while keys are still queued; we wait until they are handed out and done.
    q = make_queue()
    q.add("a")
    q.add("b")
    t, out = _in_thread(lambda: q.shut_down_with_drain(timeout=10))
    t.join(0.05)
    assert t.is_alive()
    a = q.get(timeout=1)
    q.done(a)
    t.join(0.05)
    assert t.is_alive()  # b still queued
    b = q.get(timeout=1)
    t.join(0.05)
    assert t.is_alive()  # b in flight
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
    t, out = _in_thread(lambda: q.shut_down_with_drain(timeout=10))
    t.join(0.05)
    assert t.is_alive()
    assert q.done(a) is True  # re-queued even though shutting down
    t.join(0.05)
    assert t.is_alive()
    assert q.get(timeout=1) == "a"
    q.done("a")
    t.join(5)
    assert out == [True]


def test_two_drain_callers_both_return(make_queue: Any) -> None:
    # client-go's Done signals one waiter only; every caller must return.
    q = make_queue()
    q.add("a")
    a = q.get(timeout=1)
    t1, out1 = _in_thread(lambda: q.shut_down_with_drain(timeout=10))
    t2, out2 = _in_thread(lambda: q.shut_down_with_drain(timeout=10))
    t1.join(0.05)
    t2.join(0.01)
    assert t1.is_alive() and t2.is_alive()
    q.done(a)
    t1.join(5)
    t2.join(5)
    assert out1 == [True] and out2 == [True]


def test_shut_down_releases_a_waiting_drain(make_queue: Any) -> None:
    q = make_queue()
    q.add("a")
    q.get(timeout=1)  # never done
    t, out = _in_thread(lambda: q.shut_down_with_drain())
    t.join(0.05)
    assert t.is_alive()
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
    g.join(0.05)
    d, out = _in_thread(lambda: q.shut_down_with_drain(timeout=10))
    g.join(5)
    assert results == ["shutdown"]
    q.done(a)
    d.join(5)
    assert out == [True]
