"""client-go ``util/workqueue/delaying_queue_test.go``, translated case by case, on both in-process shells.

Go drives a fake clock and polls ``Len()`` until the waiting loop has moved an entry; keyqueue has no waiting loop
(a due entry is promoted under the lock when the queue is next looked at), so ``len()`` is exact right after
``FakeClock.step`` and the polls become plain assertions.
"""

from __future__ import annotations

from typing import Any

import pytest

from keyqueue import FakeClock


def _delaying(make_queue: Any) -> tuple[Any, FakeClock]:
    clock = FakeClock(1_700_000_000.0)  # Go: NewFakeClock(time.Now())
    return make_queue("delaying", clock=clock), clock


def test_simple_queue(make_queue: Any) -> None:
    """client-go delaying_queue_test.go TestSimpleQueue: an entry delayed 50 ms is not in the queue until the
    clock passes it, then is; once processed, stepping past the 10 s heartbeat adds nothing."""
    q, clock = _delaying(make_queue)
    q.add_after("foo", 0.050)
    assert len(q) == 0
    clock.step(0.060)
    assert len(q) == 1
    q.done(q.get(timeout=5))
    clock.step(10)
    assert len(q) == 0
    with pytest.raises(TimeoutError):
        q.get(timeout=0.03)  # Go: a 30 ms poll that must not see an add


def test_deduping(make_queue: Any) -> None:
    """client-go delaying_queue_test.go TestDeduping: of two delayed adds of one key the earlier wins and there is
    one entry only — 50 ms then 70 ms fires at 50 ms and not again at 70 ms; 50 ms then 30 ms fires at 30 ms and
    not again at 50 ms."""
    q, clock = _delaying(make_queue)
    q.add_after("foo", 0.050)
    q.add_after("foo", 0.070)
    assert len(q) == 0
    clock.step(0.060)
    assert len(q) == 1
    q.done(q.get(timeout=5))
    clock.step(0.020)  # past the second add's time
    assert len(q) == 0

    q.add_after("foo", 0.050)
    q.add_after("foo", 0.030)
    assert len(q) == 0
    clock.step(0.040)
    assert len(q) == 1
    q.done(q.get(timeout=5))
    clock.step(0.020)
    assert len(q) == 0


def test_add_two_fire_early(make_queue: Any) -> None:
    """client-go delaying_queue_test.go TestAddTwoFireEarly: entries fire in due order (50 ms before 1 s), one
    added later with a longer delay fires at its own time (2 s after it was added)."""
    q, clock = _delaying(make_queue)
    q.add_after("foo", 1)
    q.add_after("bar", 0.050)
    assert len(q) == 0
    clock.step(0.060)
    assert len(q) == 1
    assert q.get(timeout=5) == "bar"
    q.add_after("baz", 2)
    clock.step(1)
    assert len(q) == 1
    assert q.get(timeout=5) == "foo"
    clock.step(2)
    assert len(q) == 1
    assert q.get(timeout=5) == "baz"


def test_copy_shifting(make_queue: Any) -> None:
    """client-go delaying_queue_test.go TestCopyShifting: three entries added in the reverse of their due order
    (1 s, 500 ms, 250 ms), all due at once after one 2 s step, come out in due order."""
    q, clock = _delaying(make_queue)
    q.add_after("foo", 1)
    q.add_after("bar", 0.5)
    q.add_after("baz", 0.25)
    assert len(q) == 0
    clock.step(2)
    assert len(q) == 3
    assert [q.get(timeout=5) for _ in range(3)] == ["baz", "bar", "foo"]
