"""Blocking hand-out of the priority queue in both shells: waking by adds, by delays falling due, by shutdown."""

from __future__ import annotations

import asyncio
import threading

import pytest

from keyqueue import FakeClock, PriorityQueue, ShutDown, aio
from tests.aio.helpers import run, until_waiting


def test_threaded_get_woken_by_add_from_another_thread() -> None:
    q: PriorityQueue[str] = PriorityQueue()
    got: list[tuple[str, int]] = []
    t = threading.Thread(target=lambda: got.append(q.get_with_priority(timeout=5)))
    t.start()
    q.add("a", priority=4)
    t.join(5)
    assert got == [("a", 4)]


def test_threaded_get_woken_when_a_delayed_key_falls_due() -> None:
    clock = FakeClock()
    q: PriorityQueue[str] = PriorityQueue(clock=clock)
    q.add("a", after=10, priority=2)
    got: list[tuple[str, int]] = []
    waiting = threading.Event()

    def getter() -> None:
        waiting.set()
        got.append(q.get_with_priority(timeout=5))

    t = threading.Thread(target=getter)
    t.start()
    assert waiting.wait(5)
    assert not got
    clock.step(10)  # wakes the waiting getter, which fires the due key itself
    t.join(5)
    assert got == [("a", 2)]


def test_threaded_get_woken_by_done_of_a_re_added_key() -> None:
    q: PriorityQueue[str] = PriorityQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a", priority=1)  # ready but locked
    got: list[tuple[str, int]] = []
    t = threading.Thread(target=lambda: got.append(q.get_with_priority(timeout=5)))
    t.start()
    q.done("a")
    t.join(5)
    assert got == [("a", 1)]


def test_threaded_shutdown_wakes_getters() -> None:
    q: PriorityQueue[str] = PriorityQueue()
    errors: list[BaseException] = []

    def getter() -> None:
        try:
            q.get(timeout=5)
        except ShutDown as exc:
            errors.append(exc)

    threads = [threading.Thread(target=getter) for _ in range(3)]
    for t in threads:
        t.start()
    q.shut_down()
    for t in threads:
        t.join(5)
    assert len(errors) == 3


def test_aio_get_woken_by_add_from_a_thread() -> None:
    async def main() -> tuple[str, int]:
        q: aio.PriorityQueue[str] = aio.PriorityQueue()
        task = asyncio.create_task(q.get_with_priority())
        await until_waiting(q)
        threading.Thread(target=q.add, args=("a",), kwargs={"priority": 7}).start()
        return await task

    assert run(main()) == ("a", 7)


def test_aio_get_woken_when_a_delayed_key_falls_due() -> None:
    async def main() -> tuple[str, int]:
        clock = FakeClock()
        q: aio.PriorityQueue[str] = aio.PriorityQueue(clock=clock)
        q.add("late", after=5, priority=1)
        task = asyncio.create_task(q.get_with_priority())
        await until_waiting(q)
        q.add("earlier", after=1, priority=-1)  # DELAYED: the waiter re-computes its wake-up
        await until_waiting(q)
        clock.step(1)
        return await task

    assert run(main()) == ("earlier", -1)


def test_aio_cancelled_get_takes_nothing() -> None:
    async def main() -> None:
        q: aio.PriorityQueue[str] = aio.PriorityQueue()
        task = asyncio.create_task(q.get_with_priority())
        await until_waiting(q)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        q.add("a", priority=2)
        assert await q.get_with_priority(timeout=1) == ("a", 2)

    run(main())


def test_aio_lease_and_iteration_work_on_the_priority_queue() -> None:
    async def main() -> list[str]:
        q: aio.PriorityQueue[str] = aio.PriorityQueue()
        q.add("low", priority=-1)
        q.add("high", priority=1)
        async with q.lease() as key:
            assert key == "high"
        q.shut_down()
        return [key async for key in q]

    assert run(main()) == ["low"]
