"""Cancellation: a get() cancelled while waiting takes nothing; one woken and then cancelled passes the wake-up
on; a key handed out before a cancellation stays with its owner (and lease/async for give it back)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from keyqueue import AddResult, aio
from tests.aio.helpers import run, state, until_waiting, waiting_getters


def test_cancelled_while_waiting_takes_nothing() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        t = asyncio.create_task(q.get())
        await until_waiting(q)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert t.cancelled()
        assert waiting_getters(q) == 0  # no stale waiter left behind
        assert q.add("a") is AddResult.QUEUED
        assert state(q) == (["a"], {"a"}, set())  # nobody took it
        assert await q.get(timeout=0) == "a"
        assert state(q) == ([], set(), {"a"})

    run(main())


def test_woken_then_cancelled_passes_the_wake_up_on_same_thread() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        first = asyncio.create_task(q.get())
        await until_waiting(q, 1)
        second = asyncio.create_task(q.get())
        await until_waiting(q, 2)
        q.add("a")  # on the loop's thread: resolves first's waiter directly
        first.cancel()  # ... which is cancelled before it could run and pop
        assert await second == "a"  # the wake-up was passed on; "a" did not sit in the queue
        assert first.cancelled()
        assert state(q) == ([], set(), {"a"})
        assert waiting_getters(q) == 0

    run(main())


def test_woken_then_cancelled_passes_the_wake_up_on_foreign_thread() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        first = asyncio.create_task(q.get())
        await until_waiting(q, 1)
        second = asyncio.create_task(q.get())
        await until_waiting(q, 2)
        adder = threading.Thread(target=q.add, args=("a",))
        adder.start()
        adder.join(5)  # blocking the loop on purpose: the wake-up is now in flight (call_soon_threadsafe) ...
        assert waiting_getters(q) == 1  # ... and first's waiter was taken out of the waiter list
        first.cancel()  # the getter it was meant for is cancelled before the wake-up lands
        assert await second == "a"
        assert first.cancelled()
        assert state(q) == ([], set(), {"a"})

    run(main())


def test_cancellation_racing_a_hand_out_loses_nothing() -> None:
    # Many rounds of: a waiting getter is woken by an add and cancelled in the same loop step. Either it was
    # cancelled before taking the key (the key is still queued) or it took it (it would have returned it);
    # a cancelled task never holds a key.
    async def main() -> None:
        q: aio.Queue[int] = aio.Queue()
        for i in range(200):
            t = asyncio.create_task(q.get())
            await until_waiting(q)
            q.add(i)
            t.cancel()
            await asyncio.gather(t, return_exceptions=True)
            assert t.cancelled()
            assert state(q) == ([i], {i}, set())
            assert await q.get(timeout=0) == i
            q.done(i)
        assert waiting_getters(q) == 0

    run(main())


def test_timed_out_getters_leave_no_waiters_behind() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        results = await asyncio.gather(*(q.get(timeout=0.01) for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, TimeoutError) for r in results)
        assert waiting_getters(q) == 0
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):  # cancellation-based timeout: also safe
                await q.get()
        assert waiting_getters(q) == 0
        q.add("a")
        assert state(q) == (["a"], {"a"}, set())

    run(main())


def test_cancelled_after_hand_out_the_caller_still_owns_the_key() -> None:
    # get() returned "a" to the task; the task is then cancelled at a later await. The key is not lost: it is
    # "processing" (re-adds are marked and redelivered) until someone calls done(), exactly as in the threading
    # shell when a worker thread forgets done().
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        got: list[str] = []
        reached = asyncio.Event()

        async def worker() -> None:
            key = await q.get()
            got.append(key)
            reached.set()
            await asyncio.sleep(3600)

        t = asyncio.create_task(worker())
        await reached.wait()
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert got == ["a"]
        assert state(q) == ([], set(), {"a"})  # held, not lost
        assert q.add("a") is AddResult.MARKED
        assert q.done("a") is True  # the owner's done: redelivered once
        assert await q.get(timeout=0) == "a"

    run(main())


def test_cancelled_drain_keeps_the_queue_draining() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        await q.get()
        d = asyncio.create_task(q.shut_down_with_drain())
        await asyncio.sleep(0)
        d.cancel()
        await asyncio.gather(d, return_exceptions=True)
        assert d.cancelled()
        assert q.shutting_down
        assert q._drainers == []
        q.done("a")
        assert await q.shut_down_with_drain(timeout=1) is True

    run(main())


def test_wait_for_around_get_never_loses_a_key() -> None:
    # The outer task is cancelled in the same loop step in which its get() was woken. Whichever way the race goes,
    # the key is either still queued (cancelled before taking it) or returned to the caller (who then owns it).
    async def main() -> None:
        q: aio.Queue[int] = aio.Queue()
        outcomes = set()
        for i in range(100):
            t = asyncio.create_task(asyncio.wait_for(q.get(), 10))
            await until_waiting(q)
            if i % 4 == 0:
                t.cancel()  # cancel first, then the add wakes the getter: it must take nothing
                q.add(i)
            else:
                q.add(i)
                for _ in range(i % 4 - 1):
                    await asyncio.sleep(0)  # vary how far the wake-up got before the cancel
                t.cancel()
            (result,) = await asyncio.gather(t, return_exceptions=True)
            if t.cancelled():
                outcomes.add("cancelled")
                assert state(q) == ([i], {i}, set())
                assert await q.get(timeout=0) == i
            else:
                outcomes.add("returned")
                assert result == i
                assert state(q) == ([], set(), {i})
            q.done(i)
            assert waiting_getters(q) == 0
        assert outcomes == {"cancelled", "returned"}

    run(main())
