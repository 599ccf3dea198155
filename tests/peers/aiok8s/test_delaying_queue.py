"""aiok8s ``aiok8s/workqueue/test_delaying_queue.py``, translated case by case onto
:class:`keyqueue.aio.DelayingQueue` with a ``FakeClock``, natively in asyncio.

aiok8s polls until its waiting loop has taken the entry (``wait_for_waiting_queue_to_fill``) and until ``len``
reaches the expected depth (``wait_for_added``); keyqueue has no waiting loop (a due entry is promoted under the lock
when the queue is looked at), so both polls become plain assertions right after ``FakeClock.step``.
"""

from __future__ import annotations

import asyncio

import pytest

from keyqueue import FakeClock
from keyqueue.aio import DelayingQueue


def _queue() -> tuple[DelayingQueue[str], FakeClock]:
    clock = FakeClock(1_700_000_000.0)  # aiok8s: FakeClock(time.time())
    return DelayingQueue(clock=clock), clock


def test_simple_queue() -> None:
    """aiok8s test_delaying_queue.py TestDelayingQueue.test_simple_queue: a key delayed 50 ms is not queued until
    the clock passes it; processed, a 10 s step adds nothing (a 30 ms wait for a key times out)."""

    async def main() -> None:
        q, clock = _queue()
        q.add_after("foo", 0.05)
        assert len(q) == 0
        clock.step(0.06)
        assert len(q) == 1
        q.done(await q.get(timeout=5))
        clock.step(10)
        with pytest.raises(TimeoutError):
            await q.get(timeout=0.03)
        assert len(q) == 0

    asyncio.run(main())


def test_deduping() -> None:
    """aiok8s test_delaying_queue.py TestDelayingQueue.test_deduping: of two delayed adds of one key the earlier
    wins and only one entry exists (50 ms then 70 ms fires once at 50 ms; 50 ms then 30 ms fires once at 30 ms)."""

    async def main() -> None:
        q, clock = _queue()
        q.add_after("foo", 0.05)
        q.add_after("foo", 0.07)
        assert len(q) == 0
        clock.step(0.06)
        assert len(q) == 1
        q.done(await q.get(timeout=5))
        clock.step(0.02)
        assert len(q) == 0

        q.add_after("foo", 0.05)
        q.add_after("foo", 0.03)
        assert len(q) == 0
        clock.step(0.04)
        assert len(q) == 1
        q.done(await q.get(timeout=5))
        clock.step(0.02)
        assert len(q) == 0

    asyncio.run(main())


def test_add_two_fire_early() -> None:
    """aiok8s test_delaying_queue.py TestDelayingQueue.test_add_two_fire_early: the 50 ms entry fires before the
    1 s one; an entry added later (2 s) fires at its own time."""

    async def main() -> None:
        q, clock = _queue()
        q.add_after("foo", 1)
        q.add_after("bar", 0.05)
        assert len(q) == 0
        clock.step(0.06)
        assert len(q) == 1
        assert await q.get(timeout=5) == "bar"
        q.add_after("baz", 2)
        clock.step(1)
        assert len(q) == 1
        assert await q.get(timeout=5) == "foo"
        clock.step(2)
        assert len(q) == 1
        assert await q.get(timeout=5) == "baz"

    asyncio.run(main())


def test_copy_shifting() -> None:
    """aiok8s test_delaying_queue.py TestDelayingQueue.test_copy_shifting: entries added in reverse due order
    (1 s, 0.5 s, 0.25 s), all due after one 2 s step, come out in due order."""

    async def main() -> None:
        q, clock = _queue()
        q.add_after("foo", 1)
        q.add_after("bar", 0.5)
        q.add_after("baz", 0.25)
        assert len(q) == 0
        clock.step(2)
        assert len(q) == 3
        assert [await q.get(timeout=5) for _ in range(3)] == ["baz", "bar", "foo"]

    asyncio.run(main())
