"""The API server's storage pool: blocking calls run off the loop, at most N at once, results and errors back."""

from __future__ import annotations

import asyncio
import threading

import pytest

from keyqueue.apiserver.server.threads import _StoragePool


def test_results_errors_and_the_thread_bound() -> None:
    pool = _StoragePool(2, "test-pool")
    release = threading.Event()
    running: list[str] = []
    lock = threading.Lock()
    peak = [0]

    def blocking(i: int) -> int:
        with lock:
            running.append(threading.current_thread().name)
            peak[0] = max(peak[0], len(running))
        release.wait(10)
        with lock:
            running.remove(threading.current_thread().name)
        return i * 10

    def boom() -> None:
        raise KeyError("nope")

    async def main() -> None:
        futs = [pool.run(blocking, i) for i in range(6)]
        await asyncio.sleep(0)
        release.set()
        assert await asyncio.gather(*futs) == [0, 10, 20, 30, 40, 50]
        with pytest.raises(KeyError, match="nope"):
            await pool.run(boom)

    try:
        asyncio.run(main())
    finally:
        pool.shutdown()
    assert peak[0] <= 2  # never more threads than the bound
    assert not running


def test_shutdown_cancels_queued_calls_and_refuses_new_ones() -> None:
    pool = _StoragePool(1, "test-pool")
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def first() -> str:
        started.set()
        release.wait(10)
        return "done"

    async def main() -> None:
        running = pool.run(first)
        queued = pool.run(ran.append, 1)  # waits behind `first` (one thread)
        await asyncio.to_thread(started.wait, 10)
        stopper = threading.Thread(target=pool.shutdown)
        stopper.start()
        with pytest.raises(asyncio.CancelledError):
            await queued  # cancelled by shutdown while `first` still holds the only thread: it never runs
        release.set()
        assert await running == "done"  # a running call finishes (shutdown waits for it)
        await asyncio.to_thread(stopper.join, 10)
        assert not stopper.is_alive()
        with pytest.raises(RuntimeError, match="shut down"):
            pool.run(ran.append, 2)

    asyncio.run(main())
    assert ran == []
