"""The hot path's scheduling and fused operations (issue 18): what they do, never how fast (speed lives in
``benchmarks/``)."""

from __future__ import annotations

from typing import Any

import pytest

import keyqueue
import keyqueue._shell as shell
from keyqueue import PriorityQueue, Queue


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the GIL hand-overs (``time.sleep(0)`` calls) of the hot path, as if other threads were alive."""
    calls: list[float] = []
    monkeypatch.setattr(shell, "_sleep", calls.append)
    monkeypatch.setattr(shell, "_active_count", lambda: 2)
    return calls


def test_lock_free_dedup_adds_hand_the_gil_over_once_per_yield_every(sleeps: list[float]) -> None:
    q: Queue[str] = Queue()
    q.add("a")
    for _ in range(3 * shell.YIELD_EVERY):
        assert q.add("a") is keyqueue.AddResult.DEDUP
    assert sleeps == [0, 0]  # the countdown starts at YIELD_EVERY, then each yield resets it
    assert q.get() == "a"  # the adds changed nothing else


def test_gets_count_too_and_yield_before_taking_the_lock(sleeps: list[float]) -> None:
    q: Queue[int] = Queue()
    for i in range(shell.YIELD_EVERY + 1):
        q.add(i)
    assert not sleeps  # adds of new keys take the lock and are not counted
    order = []
    for _ in range(shell.YIELD_EVERY + 1):
        k = q.get()
        order.append(k)
        q.done(k)
    assert sleeps == [0]
    assert order == list(range(shell.YIELD_EVERY + 1))


def test_priority_queue_dedup_adds_yield_too(sleeps: list[float]) -> None:
    q: PriorityQueue[str] = PriorityQueue()
    q.add("a", priority=3)
    for _ in range(shell.YIELD_EVERY + 1):
        assert q.add("a", priority=1) is keyqueue.AddResult.DEDUP
    assert len(sleeps) == 1


def test_no_yield_without_other_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(shell, "_sleep", calls.append)
    monkeypatch.setattr(shell, "_active_count", lambda: 1)
    q: Queue[str] = Queue()
    q.add("a")
    for _ in range(2 * shell.YIELD_EVERY + 2):
        q.add("a")
    assert calls == []
