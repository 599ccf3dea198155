"""aiok8s ``aiok8s/workqueue/test_queue.py`` (an asyncio port of client-go's queue tests), translated case by case
onto :class:`keyqueue.aio.Queue`, natively in asyncio (each test runs its coroutine with ``asyncio.run``).

aiok8s's ``add``/``done``/``shut_down`` are coroutines and ``get`` returns ``(item, quit)``; keyqueue's ``add``,
``done`` and ``shut_down`` are plain calls and ``get`` raises ``ShutDown``. The 1 ms / 3 ms sleeps that stand for
work become ``asyncio.sleep(0)`` (a yield to the other tasks), so the interleaving is kept without the wall time.
"""

from __future__ import annotations

import asyncio
import collections

from keyqueue import ShutDown
from keyqueue.aio import Queue

LATE = "added after shutdown!"


def test_basic() -> None:
    """aiok8s test_queue.py TestQueue.test_basic: 50 producer tasks each add keys 0..49 while 10 consumer tasks
    get/done until shutdown; a key added after ``shut_down`` is never handed out and every consumer ends. Added: no
    key is held by two consumers at once, and every key was handed out."""

    async def main() -> None:
        q: Queue[object] = Queue()
        held: set[object] = set()
        seen: set[object] = set()
        overlaps: list[object] = []

        async def produce() -> None:
            for j in range(50):
                q.add(j)
                await asyncio.sleep(0)

        async def consume() -> None:
            while True:
                try:
                    item = await q.get()
                except ShutDown:
                    return
                if item in held:
                    overlaps.append(item)
                held.add(item)
                seen.add(item)
                await asyncio.sleep(0)
                held.discard(item)
                q.done(item)

        producers = [asyncio.ensure_future(produce()) for _ in range(50)]
        consumers = [asyncio.ensure_future(consume()) for _ in range(10)]
        await asyncio.gather(*producers)
        q.shut_down()
        q.add(LATE)
        await asyncio.wait_for(asyncio.gather(*consumers), 30)
        assert LATE not in seen
        assert overlaps == []
        assert seen == set(range(50))
        assert len(q) == 0

    asyncio.run(main())


def test_add_while_processing() -> None:
    """aiok8s test_queue.py TestQueue.test_add_while_processing: 50 keys; 10 consumer tasks each re-add a key they
    hold until they have seen it twice (the dirty-while-processing path); after ``shut_down`` every consumer ends.
    Added: no overlap of holders, the queue ends empty."""

    async def main() -> None:
        q: Queue[int] = Queue()
        held: set[int] = set()
        overlaps: list[int] = []

        async def add(i: int) -> None:
            q.add(i)

        async def consume() -> None:
            counters: collections.Counter[int] = collections.Counter()
            while True:
                try:
                    item = await q.get()
                except ShutDown:
                    return
                if item in held:
                    overlaps.append(item)
                held.add(item)
                counters[item] += 1
                if counters[item] < 2:
                    q.add(item)
                await asyncio.sleep(0)
                held.discard(item)
                q.done(item)

        producers = [asyncio.ensure_future(add(i)) for i in range(50)]
        consumers = [asyncio.ensure_future(consume()) for _ in range(10)]
        await asyncio.gather(*producers)
        q.shut_down()
        await asyncio.wait_for(asyncio.gather(*consumers), 30)
        assert overlaps == []
        assert len(q) == 0

    asyncio.run(main())


def test_len() -> None:
    """aiok8s test_queue.py TestQueue.test_len: two distinct adds give len 2; re-adding a waiting key does not."""
    q: Queue[str] = Queue()
    q.add("foo")
    assert len(q) == 1
    q.add("bar")
    assert len(q) == 2
    q.add("foo")
    assert len(q) == 2


def test_reinsert() -> None:
    """aiok8s test_queue.py TestQueue.test_reinsert: a key re-added while processed is handed out again after its
    ``done``; after the second ``done`` the queue is empty."""

    async def main() -> None:
        q: Queue[str] = Queue()
        q.add("foo")
        item = await q.get(timeout=5)
        assert item == "foo"
        q.add(item)
        q.done(item)
        item = await q.get(timeout=5)
        assert item == "foo"
        q.done(item)
        assert len(q) == 0

    asyncio.run(main())
