"""Waking a waiting get(): adds and done() from other threads, delayed keys (FakeClock stepped from another thread
and from the loop; the real clock), timeouts, several loops, and a waiter whose loop died."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from keyqueue import AddResult, FakeClock, ShutDown, aio
from tests.aio.helpers import run, state, until_waiting, waiting_getters


def test_add_from_a_foreign_thread_wakes_a_waiting_get() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        t = asyncio.create_task(q.get())
        await until_waiting(q)
        assert await asyncio.to_thread(q.add, "x") is AddResult.QUEUED
        assert await t == "x"

    run(main(), debug=True)


def test_done_from_a_foreign_thread_wakes_a_getter_for_the_redelivery() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        q.add("a")
        a = await q.get()
        q.add(a)  # marked
        t = asyncio.create_task(q.get())
        await until_waiting(q)
        assert await asyncio.to_thread(q.done, a) is True
        assert await t == "a"

    run(main())


def test_add_from_the_loop_wakes_a_waiting_get() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        t = asyncio.create_task(q.get())
        await until_waiting(q)
        q.add("x")
        assert await t == "x"

    run(main())


def test_add_from_a_thread_running_another_event_loop_wakes_a_waiting_get() -> None:
    # The adder's own running loop is not the getter's loop: the wake-up must still go through the getter's loop
    # (call_soon_threadsafe), not be applied directly in the wrong loop.
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        t = asyncio.create_task(q.get())
        await until_waiting(q)

        async def add_in_other_loop() -> AddResult:
            return q.add("x")

        def other_thread() -> AddResult:
            return asyncio.run(add_in_other_loop())

        assert await asyncio.to_thread(other_thread) is AddResult.QUEUED
        assert await t == "x"
        assert waiting_getters(q) == 0

    run(main(), debug=True)  # debug: a direct set_result from the other loop's thread would raise


def test_add_before_any_loop_exists() -> None:
    q: aio.Queue[str] = aio.Queue()
    q.add("a")  # no event loop anywhere yet
    assert run(q.get(timeout=0)) == "a"


def test_getters_in_two_loops_are_each_woken_in_their_own_loop() -> None:
    q: aio.Queue[str] = aio.Queue()
    got: list[str] = []
    both_waiting = threading.Barrier(3)

    def loop_thread() -> None:
        async def main() -> None:
            t = asyncio.create_task(q.get(timeout=10))
            await asyncio.sleep(0)
            await asyncio.to_thread(both_waiting.wait, 5)
            got.append(await t)

        asyncio.run(main())

    threads = [threading.Thread(target=loop_thread) for _ in range(2)]
    for t in threads:
        t.start()
    both_waiting.wait(5)
    assert waiting_getters(q) == 2
    q.add("a")
    q.add("b")
    for t in threads:
        t.join(5)
    assert sorted(got) == ["a", "b"]


def test_waiter_whose_loop_is_closed_does_not_break_add() -> None:
    q: aio.Queue[str] = aio.Queue()
    dead = asyncio.new_event_loop()
    coro = q.get()
    task = dead.create_task(coro)
    dead.run_until_complete(asyncio.sleep(0))  # the get() is now parked in the dead loop
    assert waiting_getters(q) == 1
    dead.close()  # closed without cancelling its task: that waiter can never run again
    assert q.add("a") is AddResult.QUEUED  # must not raise
    assert run(q.get(timeout=1)) == "a"  # the key was not lost to the dead waiter
    # The abandoned task is the point of this test: keep its "Task was destroyed but it is pending" report
    # (from the dead loop's exception handler) out of the test log.
    dead.set_exception_handler(lambda loop, context: None)
    del task
    coro.close()
    gc.collect()


@pytest.mark.parametrize("from_thread", [True, False], ids=["step-from-thread", "step-from-loop"])
def test_fake_clock_step_wakes_a_get_waiting_for_a_delayed_key(from_thread: bool) -> None:
    async def main() -> None:
        clock = FakeClock()
        q: aio.DelayingQueue[str] = aio.DelayingQueue(clock=clock)
        assert q.add_after("a", 5.0) is AddResult.DELAYED
        t = asyncio.create_task(q.get())
        await until_waiting(q)
        clock.step(4.0) if not from_thread else await asyncio.to_thread(clock.step, 4.0)
        await until_waiting(q)  # woken, nothing due yet: it parks again (a fake clock never times out)
        assert not t.done()
        if from_thread:
            await asyncio.to_thread(clock.step, 1.0)
        else:
            clock.step(1.0)
        assert await t == "a"
        assert state(q) == ([], set(), {"a"})

    run(main())


def test_several_delayed_keys_due_at_once_wake_several_getters() -> None:
    async def main() -> None:
        clock = FakeClock()
        q: aio.DelayingQueue[str] = aio.DelayingQueue(clock=clock)
        tasks = [asyncio.create_task(q.get()) for _ in range(3)]
        await until_waiting(q, 3)
        for k in "abc":
            q.add_after(k, 1.0)
        await asyncio.to_thread(clock.step, 1.0)
        assert sorted(await asyncio.gather(*tasks)) == ["a", "b", "c"]

    run(main())


def test_real_clock_delayed_key_wakes_a_waiting_get_and_earlier_entry_rearms_it() -> None:
    async def main() -> None:
        q: aio.DelayingQueue[str] = aio.DelayingQueue()
        q.add_after("late", 3600.0)
        t = asyncio.create_task(q.get(timeout=5))
        await until_waiting(q)
        await asyncio.to_thread(q.add_after, "soon", 0.01)  # must not sleep for the hour
        assert await t == "soon"

    run(main())


def test_real_clock_delayed_key_wakes_a_get_waiting_without_timeout() -> None:
    # No add wakes this getter: only its own timer (armed for the entry's due time) can, and there is no timeout
    # to fall back on. run()'s 10 s deadline turns a missing wake-up into a failure instead of a hang.
    async def main() -> None:
        q: aio.DelayingQueue[str] = aio.DelayingQueue()
        assert q.add_after("a", 0.02) is AddResult.DELAYED
        t = asyncio.create_task(q.get())
        await until_waiting(q)
        assert not t.done()  # control: not due yet, it really waits
        assert await t == "a"
        assert state(q) == ([], set(), {"a"})
        assert waiting_getters(q) == 0

    run(main())


def test_add_rate_limited_from_a_thread_then_step() -> None:
    async def main() -> None:
        clock = FakeClock()
        q: aio.RateLimitingQueue[str] = aio.RateLimitingQueue(clock=clock)
        t = asyncio.create_task(q.get())
        await until_waiting(q)
        assert await asyncio.to_thread(q.add_rate_limited, "a") is AddResult.DELAYED
        assert q.num_requeues("a") == 1
        await asyncio.to_thread(clock.step, 0.005)
        assert await t == "a"
        q.forget("a")
        assert q.num_requeues("a") == 0

    run(main())


def test_get_timeout() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        with pytest.raises(TimeoutError, match="timed out"):
            await q.get(timeout=0.01)
        with pytest.raises(TimeoutError):
            await q.get(timeout=0)
        with pytest.raises(ValueError):
            await q.get(timeout=-1)
        with pytest.raises(TypeError):
            await q.get(timeout="1")  # type: ignore[arg-type]
        q.add("a")
        assert await q.get(timeout=0) == "a"
        assert waiting_getters(q) == 0

    run(main())


def test_fake_clock_get_timeout_is_real_time() -> None:
    async def main() -> None:
        q: aio.DelayingQueue[str] = aio.DelayingQueue(clock=FakeClock())
        q.add_after("a", 10.0)
        with pytest.raises(TimeoutError):
            await q.get(timeout=0.01)
        assert waiting_getters(q) == 0

    run(main())


def test_shut_down_from_a_thread_wakes_every_getter() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue()
        tasks = [asyncio.create_task(q.get()) for _ in range(4)]
        await until_waiting(q, 4)
        await asyncio.to_thread(q.shut_down)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, ShutDown) for r in results)
        with pytest.raises(ShutDown):
            await q.get()

    run(main())


def test_stats_queue_counts_every_add() -> None:
    async def main() -> None:
        q: aio.Queue[str] = aio.Queue(stats=True)
        for _ in range(3):
            q.add("a")
        key = await q.get()
        q.add(key)
        q.done(key)
        s = q.stats()
        assert (s.adds, s.queued, s.deduplicated, s.marked, s.gets, s.dones, s.redelivered) == (4, 1, 2, 1, 1, 1, 1)
        with pytest.raises(RuntimeError, match="stats=True"):
            aio.Queue().stats()

    run(main())
