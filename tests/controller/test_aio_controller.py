"""The asyncio controller: outcomes, survival, stopping (wait, timeout → cancel, drop/drain), signals, and one
reconcile per key at once with a control over asyncio.Queue."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import pytest

from keyqueue import FakeClock, ItemExponentialFailureRateLimiter, Result, TerminalError, aio
from tests.aio.helpers import run


class ObservedPQ(aio.PriorityQueue[str]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dones: list[str] = []
        self.done_event = asyncio.Event()

    def done(self, item: str) -> bool:
        requeued = super().done(item)
        self.dones.append(item)
        self.done_event.set()
        return requeued


async def wait_dones(q: ObservedPQ, n: int) -> None:
    while len(q.dones) < n:
        q.done_event.clear()
        await q.done_event.wait()


def test_outcomes_drive_the_queue() -> None:
    async def main() -> None:
        clock = FakeClock()
        q: aio.PriorityQueue[str] = aio.PriorityQueue(ItemExponentialFailureRateLimiter(1.0, 1000.0), clock=clock)
        actions: dict[str, Any] = {"err": ValueError("x"), "term": TerminalError("t"),
                                   "ra": Result(requeue_after=2, priority=-1), "ok": None}

        async def reconcile(key: str) -> Result | None:
            await asyncio.sleep(0)
            a = actions[key]
            if isinstance(a, Exception):
                raise a
            return a  # type: ignore[no-any-return]

        c = aio.Controller(reconcile, q)
        q.rate_limiter.when("term")
        q.rate_limiter.when("ok")
        for key, prio in [("err", 5), ("term", 4), ("ra", 3), ("ok", 2)]:
            q.add(key, priority=prio)
        for _ in range(4):
            assert await c.process_next(timeout=1)
        assert (q.num_requeues("err"), q.num_requeues("term"), q.num_requeues("ra"), q.num_requeues("ok")) == (
            1, 1, 0, 0)
        assert len(q) == 0
        clock.step(1)
        assert await q.get_with_priority(timeout=1) == ("err", 5)  # requeued at its dequeued priority
        clock.step(1)
        assert await q.get_with_priority(timeout=1) == ("ra", -1)  # at the Result's priority
        clock.step(1000)
        assert len(q) == 0  # "term" and "ok" were not requeued
        q.shut_down()
        assert await c.process_next(timeout=1) is False

    run(main())


def test_sync_reconcile_function_and_plain_queue() -> None:
    async def main() -> None:
        q: aio.RateLimitingQueue[str] = aio.RateLimitingQueue(clock=FakeClock())
        seen: list[str] = []
        c = aio.Controller(seen.append, q)  # returns None: success
        q.add("a")
        assert await c.process_next(timeout=1)
        assert seen == ["a"]
        assert c.queue is q

    run(main())


def test_an_exception_does_not_kill_the_worker_task() -> None:
    async def main() -> None:
        tasks: dict[str, asyncio.Task[Any] | None] = {}

        async def reconcile(key: str) -> None:
            tasks[key] = asyncio.current_task()
            if key == "bad":
                raise RuntimeError("boom")

        q = ObservedPQ(clock=FakeClock())  # the rate-limited requeue of "bad" never falls due
        async with aio.Controller(reconcile, q, workers=1, stop_timeout=5):
            q.add("bad")
            await wait_dones(q, 1)
            q.add("good")
            await wait_dones(q, 2)
        assert tasks["bad"] is tasks["good"]
        assert q.num_requeues("bad") == 1

    run(main())


def test_stop_waits_for_in_flight_then_timeout_cancels() -> None:
    async def main() -> None:
        inside = asyncio.Event()
        release = asyncio.Event()
        finished: list[str] = []

        async def reconcile(key: str) -> None:
            inside.set()
            await release.wait()
            finished.append(key)

        q = ObservedPQ()
        c = aio.Controller(reconcile, q, workers=2)
        c.start()
        q.add("a")
        await inside.wait()
        stopper = asyncio.create_task(c.stop(timeout=5))
        for _ in range(10):
            await asyncio.sleep(0)
        assert q.shutting_down and not stopper.done()  # waiting for "a"
        release.set()
        assert await stopper is True
        assert finished == ["a"] and q.dones == ["a"]

        # A reconcile that never finishes: stop times out, cancels it, and done() still runs.
        inside2 = asyncio.Event()

        async def stuck(key: str) -> None:
            inside2.set()
            await asyncio.Event().wait()

        q2 = ObservedPQ()
        c2 = aio.Controller(stuck, q2)
        c2.start()
        q2.add("s")
        await inside2.wait()
        assert await c2.stop(timeout=0.05) is False
        assert q2.dones == ["s"]
        assert all(t.done() for t in c2._tasks)

    run(main())


@pytest.mark.parametrize("drain", [False, True])
def test_backlog_dropped_or_drained(drain: bool) -> None:
    async def main() -> list[str]:
        inside = asyncio.Event()
        release = asyncio.Event()
        seen: list[str] = []

        async def reconcile(key: str) -> None:
            seen.append(key)
            if key == "first":
                inside.set()
                await release.wait()

        q = ObservedPQ()
        c = aio.Controller(reconcile, q, drain=drain)
        c.start()
        q.add("first")
        await inside.wait()
        q.add("b")
        q.add("c", priority=1)
        stopper = asyncio.create_task(c.stop(timeout=5))
        await asyncio.sleep(0)
        release.set()
        assert await stopper
        return seen

    assert run(main()) == (["first", "c", "b"] if drain else ["first"])


def test_run_stops_on_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")

    async def main() -> bool:
        async def reconcile(key: str) -> None:
            os.kill(os.getpid(), signal.SIGTERM)  # run() installed its handler before starting the workers

        c = aio.Controller(reconcile, workers=2, stop_timeout=5)
        c.queue.add("a")
        ok = await c.run()
        assert c.stopping and c.queue.shutting_down
        return ok

    before = signal.getsignal(signal.SIGTERM)
    assert run(main()) is True
    assert signal.getsignal(signal.SIGTERM) is before


def test_start_needs_a_loop_and_only_once() -> None:
    c: aio.Controller[str] = aio.Controller(lambda key: None)
    with pytest.raises(RuntimeError):
        c.start()  # no running loop

    async def main() -> None:
        c.start()
        with pytest.raises(RuntimeError, match="already started"):
            c.start()
        assert await c.stop(timeout=5)

    run(main())


# -- never two reconciles of one key at once ----------------------------------------------------------------------


class Detector:
    def __init__(self) -> None:
        self.in_flight: set[str] = set()
        self.violations = 0
        self.calls = 0
        self.entered = asyncio.Event()
        self.peer = asyncio.Event()

    async def reconcile(self, key: str) -> None:
        """Waits (briefly) for a second reconcile of the same key: a pool that allows one shows up at once."""
        self.calls += 1
        if key in self.in_flight:
            self.violations += 1
            self.peer.set()
        self.in_flight.add(key)
        self.entered.set()
        try:
            await asyncio.wait_for(self.peer.wait(), 0.2)
        except TimeoutError:
            pass
        finally:
            self.in_flight.discard(key)


def test_same_key_never_reconciled_twice_at_once() -> None:
    async def main() -> Detector:
        det = Detector()
        q = ObservedPQ()
        c = aio.Controller(det.reconcile, q, workers=2)
        c.start()
        q.add("k")
        await det.entered.wait()
        q.add("k")  # the idle worker must not take it before done
        await wait_dones(q, 2)
        assert await c.stop(timeout=5)
        return det

    det = run(main())
    assert det.calls == 2
    assert det.violations == 0


def test_control_asyncio_queue_pool_is_caught() -> None:
    async def main() -> Detector:
        det = Detector()
        q: asyncio.Queue[str] = asyncio.Queue()

        async def worker() -> None:
            while True:
                key = await q.get()
                await det.reconcile(key)
                q.task_done()

        workers = [asyncio.create_task(worker()) for _ in range(2)]
        await q.put("k")
        await det.entered.wait()
        await q.put("k")
        await q.join()
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return det

    det = run(main())
    assert det.calls == 2
    assert det.violations == 1


def test_stress_with_thread_producers() -> None:
    async def main() -> tuple[int, int]:
        in_flight: set[str] = set()
        counts = [0, 0]

        async def reconcile(key: str) -> None:
            counts[0] += 1
            if key in in_flight:
                counts[1] += 1
            in_flight.add(key)
            await asyncio.sleep(0)
            in_flight.discard(key)

        c = aio.Controller(reconcile, workers=16, drain=True)
        c.start()

        def produce(i: int) -> None:
            for n in range(2000):
                c.queue.add(f"k{(n * 5 + i) % 32}")

        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, produce, i) for i in range(4)))
        assert await c.stop(timeout=10)
        return counts[0], counts[1]

    calls, violations = run(main())
    assert calls >= 32
    assert violations == 0
